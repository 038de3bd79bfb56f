"""The report's `offload` section says what the framework did, not only what it is set to
(weights fetched or not, gradients swapped or not), and `run`'s table says it in a sentence.
Each expectation follows from the scenario's placement, worked out in the comments."""

from __future__ import annotations

import json

from conftest import SCENARIOS

from tiersim.core.units import fmt_time
from tiersim.report.text import step_tables

ONE_T = SCENARIOS / "zero-infinity-1t-dgx2.yaml"
TEN_B = SCENARIOS / "zero-offload-10b-dgx2.yaml"
FSDP = SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml"


def _run(cli, tmp_path, path, *sets: str) -> tuple[dict, str]:
    flags = [a for s in sets for a in ("--set", s)]
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path / "j", *flags)
    assert code == 0, err
    code, table, err = cli("run", path, "--out", tmp_path / "t", *flags)
    assert code == 0, err
    return json.loads(out)["offload"], next(
        x for x in table.splitlines() if x.startswith("Offload")
    )


def test_zero2_keeps_weights_whole_and_swaps_nothing(cli, tmp_path):
    # ZeRO-2 (parallel.zero_stage 2), weights homed on HBM: nothing is fetched; the optimizer
    # state on DRAM (not flash), so DeepSpeed's gradient swap has nothing to swap through
    off, line = _run(cli, tmp_path, TEN_B)
    assert (off["weights_streamed"], off["fetch"], off["swap_gradients"]) == (False, "layer", False)
    assert "weights kept whole in GPU memory, nothing fetched" in line
    # ZeRO-1/2 steps the whole partition at once: 10,279,047,168 parameters / 16 ranks =
    # 642,440,448 in one tile
    assert off["optimizer_tiles"] == 1 and off["optimizer_tile_parameters"] == 642_440_448
    assert "the optimizer steps 1 sub-group of up to 642 M parameters" in line
    # ZeRO-1/2 leaves overlap_comm off (zero/config.py): the copies block backward
    assert "at the accumulation boundary (overlap_comm off: the gradient copies run" in line


def test_zero3_on_nvme_fetches_submodules_and_swaps_host_gradients(cli, tmp_path):
    # ZeRO-3 with weights on NVMe: fetched, by submodule (4 a layer, Megatron-DeepSpeed's
    # query_key_value, dense, dense_h_to_4h, dense_4h_to_h; the MLP's first matrix
    # 25,600 x 102,400 = 2.62e9 the largest: test_offload_frameworks). Gradients placed on
    # NVMe itself are not swapped; homed on DRAM with the state on NVMe, they are.
    off, line = _run(cli, tmp_path, ONE_T, "model.layers=2")
    assert (off["weights_streamed"], off["fetch"], off["swap_gradients"]) == (
        True,
        "submodule",
        False,
    )
    assert (off["fetch_units_per_layer"], off["fetch_parts_per_layer"]) == (4, 4)  # no tiles
    assert (
        "parameters fetched per submodule (consecutive small ones bucketed together): 4 fetches "
        "a layer, the largest 2.62 B parameters a fetch; no operator tiled" in line
    )
    off, line = _run(cli, tmp_path, ONE_T, "model.layers=2", "placement.gradients=dram")
    assert off["swap_gradients"] is True
    assert "at the accumulation boundary, through NVMe with the optimizer state" in line


def test_tiles_are_counted_as_fetches_not_as_submodules(cli, tmp_path):
    # On 10 GB the MLP's two matrices (2,621,440,000 and 2,621,670,400 parameters) run in 2
    # tiles each (test_offload_frameworks): the layer's 4 submodules are fetched as
    # 2 + 2 x 2 = 6 fetches, the largest the untiled query_key_value, 3h^2 + 3h = 3 x
    # 655,360,000 + 76,800 = 1,966,156,800 parameters (more than half the larger matrix,
    # 1,310,835,200)
    off, line = _run(cli, tmp_path, ONE_T, "model.layers=2", "hardware.tiers.hbm.capacity=10 GB")
    assert (off["fetch_units_per_layer"], off["fetch_parts_per_layer"]) == (6, 4)
    assert off["largest_fetch_parameters"] == 3 * 25_600**2 + 3 * 25_600 == 1_966_156_800
    assert (
        "parameters fetched per submodule (consecutive small ones bucketed together): 6 fetches "
        "a layer (4 submodule fetches, 2 of them cut into tiles), the largest 1.97 B parameters "
        "a fetch; operators tiled as said above" in line
    )


def test_the_tiling_line_names_each_tiled_part_its_parameters_and_which_way_it_costs(cli, tmp_path):
    # the same 10 GB run: parts 2 and 3 of the layer's 4 (the MLP's 2,621,440,000 and
    # 2,621,670,400-parameter matrices, "2.62 B" each) in 2 tiles; the table says so, and
    # whether the tiled step is slower or faster than the untiled one the report measured
    sets = ("model.layers=2", "hardware.tiers.hbm.capacity=10 GB")
    code, out, err = cli("run", ONE_T, "--format", "json", "--out", tmp_path / "j", *_flags(sets))
    assert code == 0, err
    report = json.loads(out)
    cost = report["offload"]["tiling_cost_s"]
    head = (
        "memory-centric tiling (every layer alike; L0.k: the k-th of a layer's 4 fetched parts, "
        "from 0): L0.2 (2.62 B parameters) in 2 tiles, L0.3 (2.62 B parameters) in 2 tiles; it "
    )
    whole = ", against the same operators whole on a GPU memory that holds them"
    # here the tiled step is the faster: each half MLP's drive read, issued a use ahead
    # (engine/param_swap.py), hides under the operator before it where the whole one does not
    assert cost < 0
    assert f"{head}saves {fmt_time(-cost)} a step{whole}" in step_tables(report)
    # a tiled step slower than the whole one costs time
    report["offload"]["tiling_cost_s"] = -cost
    assert f"{head}costs {fmt_time(-cost)} a step{whole}" in step_tables(report)


def _flags(sets: tuple[str, ...]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def test_a_layer_fetched_whole_in_tiles_says_so(cli, tmp_path):
    # FSDP2 fetches the 1T model's layer whole: 7,864,652,800 parameters, fp16 weights and
    # gradients 4 B each, 31.46 GB against room 32e9 - 1 GiB - 367,001,600 = 30,559,256,576
    # B: 2 tiles of 3,932,326,400 parameters (the 1 GiB set: with the stack's 17,039,360 B of
    # cuBLAS workspaces the layer's 31,458,611,200 B fits the room whole, in one tile)
    sets = (
        "model.layers=2",
        "training.framework=fsdp",
        "training.offload.tiling=true",
        "training.workspace=1 GiB",
    )
    off, line = _run(cli, tmp_path, ONE_T, *sets)
    assert (off["fetch_units_per_layer"], off["fetch_parts_per_layer"]) == (2, 1)
    assert off["largest_fetch_parameters"] == 7_864_652_800 // 2
    assert (
        "parameters fetched a layer at a time, each layer in 2 tiles (2 fetches a layer), the "
        "largest 3.93 B parameters a fetch" in line
    )


def test_fsdp2_fetches_a_layer_at_a_time(cli, tmp_path):
    # FSDP2: one all-gather per fully_shard unit (a block); gradients offloaded every
    # micro-batch and accumulated on the host; PyTorch's AdamW steps whole tensors (no
    # sub-groups to report)
    off, line = _run(cli, tmp_path, FSDP)
    assert (off["weights_streamed"], off["fetch"]) == (True, "layer")
    assert "Offload as FSDP2 moves state" in line and "parameters fetched a layer at a time" in line
    assert "gradients offloaded to the host every micro-batch and added there" in line
    assert "sub-group" not in line


def test_megatron_reports_as_the_generic_engine(cli, tmp_path):
    # framework: megatron runs tiersim's generic engine: no offload section, no sentence
    path = SCENARIOS / "gpt3-175b-tp-pp.yaml"
    out = tmp_path / "m"
    code, text, err = cli(
        "run", path, "--format", "json", "--out", out, "--set", "training.framework=megatron"
    )
    assert code == 0, err
    assert "offload" not in json.loads(text)


def test_the_gpus_wait_on_cpu_work_is_labelled_as_more_than_the_optimizer(cli, tmp_path):
    # FSDP2: the host adds of offloaded gradients run on the CPU besides the optimizer, so
    # the GPU's wait on the CPU can exceed the optimizer's own time: the row says CPU work
    code, out, err = cli("run", FSDP, "--out", tmp_path / "t")
    assert code == 0, err
    rows = {line[:31].strip(): line for line in out.splitlines()}
    assert "exposed CPU work (GPU waits)" in rows and "exposed CPU optimizer" not in out
