"""The host's memory timeline of the step (engine/host_memory.py): each part's bytes worked out
here by hand for the shipped offload scenarios, its peak against the engine's DRAM occupancy
peak (equal where they count the same things, the difference named where not), the node's
total, and the host's `fits` decided on it (a step that runs out says at which moment)."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS
from engine_helpers import merge, scenario, tiny

from tiersim.config.load import load_scenario
from tiersim.engine.host_memory import host_timeline
from tiersim.report.json_report import inventory_report
from tiersim.runner import Run
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ZERO_OFFLOAD = SCENARIOS / "zero-offload-10b-dgx2.yaml"
ZERO_INFINITY = SCENARIOS / "zero-infinity-1t-dgx2.yaml"
FSDP2 = SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml"
MiB = 2**20


def _host(path, *overrides: str):
    s = load_scenario(path, list(overrides)).scenario
    r = resolve(s)
    inv = build_inventory(r)
    return s, inv, host_timeline(r, inv)


# ZeRO-Offload's 10B (hidden 4096, 50 layers, FFN 16384, GPT-2 vocabulary 50,257, 1,024
# positions) over 16 GPUs with ZeRO-2: a layer's q/k/v, projection, two MLP matrices with
# their biases and two LayerNorms are 12·h² + 13·h = 201,326,592 + 53,248 = 201,379,840
# parameters; x 50 = 10,068,992,000; + wte 50,257 x 4096 = 205,852,672 + wpe 1,024 x 4096 =
# 4,194,304 + the final LayerNorm 8,192 = 10,279,047,168; / 16 = 642,440,448 a GPU.
ZO_PARAMS = (50 * (12 * 4096**2 + 13 * 4096) + 50_257 * 4096 + 1_024 * 4096 + 2 * 4096) // 16
ZO_GRADIENTS = 642_440_448 * 2  # fp16 on the host: 1,284,880,896
ZO_MASTER = 642_440_448 * 4  # 2,569,761,792
ZO_OPTIMIZER = 642_440_448 * 8  # two fp32 moments: 5,139,523,584
# pin_memory: DeepSpeed pins one flat partition per class; PyTorch's caching host allocator
# rounds it to a power of two: gradients 1,284,880,896 -> 2^31 (+862,602,752), master
# 2,569,761,792 -> 2^32 (+1,725,205,504); the moments are allocated unpinned
ZO_ROUNDING = (2**31 - ZO_GRADIENTS) + (2**32 - ZO_MASTER)  # 2,587,808,256
# the host gradient buffer: the largest tensor (wte, 205,852,672 values) in fp16 = 411,705,344
# B, pinned: 2^29
ZO_BUFFER = 2**29
# at the accumulation boundary the gradients cross as fp32: 4 - 2 B beyond the stored fp16
ZO_FP32 = 642_440_448 * (4 - 2)


def test_zero_offload_host_parts_by_hand():
    _, _, h = _host(ZERO_OFFLOAD)
    t = h.timeline
    assert ZO_PARAMS == 642_440_448
    assert t.peak_parts == {
        "resident optimizer": ZO_OPTIMIZER,
        "pinned rounding (power-of-two blocks)": ZO_ROUNDING,
        "resident master": ZO_MASTER,
        "resident gradients": ZO_GRADIENTS,
        "fp32 gradients beyond the 16-bit ones (accumulation boundary)": ZO_FP32,
        "host gradient buffer (ZeRO-Offload, pinned)": ZO_BUFFER,
    }
    # every fp32 gradient is held until the update: the peak is the last layer's backward
    assert t.peak_event.moment == "backward: layer 0"
    assert t.peak_allocated_bytes == 13_403_726_336 == sum(t.peak_parts.values())
    # the node: the DGX-2's 16 GPUs hold the same in lockstep, each with 1.5 TB / 16
    assert (h.node_gpus, h.node_stages) == (16, 1)
    assert h.node_peak_bytes == 16 * 13_403_726_336
    assert h.node_capacity_bytes == 16 * 96e9 and t.fits


# ZeRO-Infinity's 1T (Megatron's shape: hidden 25,600, 128 layers) with micro-batch 7, sequence
# 1,024 and full recompute: each layer's checkpoint (its input, 2 B a value) goes to the host:
# 2 x 1,024 x 7 x 25,600 = 367,001,600 B a layer, 46,976,204,800 for the 128
ZI_LAYER = 2 * 1024 * 7 * 25_600
# DeepSpeed's defaults (runtime/zero/offload_config.py): offload_optimizer buffer_count 4 of
# sub_group_size 1e9 fp32 values = 4e9 B, pinned to 2^32 each; offload_param buffer_count 5 of
# buffer_size 1e8 fp16 values = 2e8 B, pinned to 2^28 each
ZI_OPTIMIZER_SWAP = 4 * 2**32  # 17,179,869,184
ZI_PARAMETER_SWAP = 5 * 2**28  # 1,342,177,280


def test_zero_infinity_host_parts_by_hand():
    _, _, h = _host(ZERO_INFINITY)
    t = h.timeline
    assert t.peak_parts == {
        "offloaded activations": 128 * ZI_LAYER,
        "optimizer swap buffers (pinned)": ZI_OPTIMIZER_SWAP,
        "parameter swap buffers (pinned)": ZI_PARAMETER_SWAP,
    }
    # gradients, master and moments live on NVMe: no fp32 gradient waits in host memory
    assert all(not e.part.startswith("fp32") for e in t.events)
    assert (
        t.peak_event.moment == "forward: layer 127, part 0"
    )  # every checkpoint out, none read back
    assert t.peak_allocated_bytes == 128 * ZI_LAYER + ZI_OPTIMIZER_SWAP + ZI_PARAMETER_SWAP


def test_fsdp2_cpu_optimizer_temporaries_and_pinned_tensors_by_hand():
    """Llama-2-7B (6,738,415,616 parameters) over 8 GPUs, fp32, CPUOffloadPolicy: weights and
    gradients 842,301,952 x 4 B each, two fp32 moments x 8 B; FSDP2 pins each sharded tensor
    apart: q/k/v/o shards 4096² / 8 x 4 B = 2^23 B exactly; gate/up/down 4096 x 11,008 / 8 x 4 =
    22,544,384 B -> 2^25 (+11,010,048 each, 96 of them); embedding and head 32,000 x 4096 / 8
    x 4 = 65,536,000 -> 2^26 (+1,572,864 each); norms 2,048 B = 2^11. torch.optim.AdamW on CPU
    tensors takes its single-tensor path: two temporaries of a parameter's shard beside the
    previous parameter's denominator (state/single_tensor_adam.py), at most at the head: 2 x
    16,384,000 values beside the final norm's shard, 4096 / 8 = 512 values, x 4 B."""
    _, _, h = _host(FSDP2)
    per_class = 96 * (2**25 - 22_544_384) + 2 * (2**26 - 65_536_000)
    assert h.timeline.peak_parts == {
        "resident optimizer": 842_301_952 * 8,
        "resident weights": 842_301_952 * 4,
        "resident gradients": 842_301_952 * 4,
        "pinned rounding (power-of-two blocks)": 2 * per_class,  # weights and gradients
        "CPU optimizer step temporaries": (2 * 16_384_000 + 512) * 4,
    }
    assert h.timeline.peak_event.moment == "optimizer step"


# --- against the engine's DRAM occupancy (one simulation each, shared) ---------------------------


@pytest.fixture(scope="module")
def runs():
    made: dict[str, Run] = {}

    def _run(path) -> Run:
        if path not in made:
            made[path] = Run(load_scenario(path).scenario)
        return made[path]

    return _run


def _peaks(run: Run) -> tuple[int, int]:
    host = run.resolved.machine.cpu.memory
    return run.host_timeline.timeline.peak_allocated_bytes, run.result.tiers[host].peak_bytes


@pytest.mark.parametrize(
    "name",
    [
        "zero-offload-10b-dgx2",  # resident state, pinned blocks, fp32 gradients at the boundary
        "mixtral-8x7b-ep-dgx-h100",  # the CPU update's gradients and state, one unit at a time
        "default",  # an async checkpoint's staged copy, held until durable
    ],
)
def test_the_peak_is_the_engines_where_they_count_the_same(runs, name):
    timeline, engine = _peaks(runs(SCENARIOS / f"{name}.yaml"))
    assert timeline == engine


def test_the_differences_from_the_engine_are_named(runs):
    # FSDP2: the engine holds no CPU optimizer temporaries ((2 x 16,384,000 + 512) x 4 B, above)
    timeline, engine = _peaks(runs(FSDP2))
    assert timeline - engine == (2 * 16_384_000 + 512) * 4
    # ZeRO-Infinity: at the engine's peak (backward begins, every checkpoint still out) two
    # fp32 gradient writes HBM -> DRAM -> NVMe are in flight, staged through host memory
    # (simulation.chunk_size x staging_chunks = 64 MiB x 4 at most), which the timeline leaves
    # to DeepSpeed's pinned swap buffers: an MLP part's (its 4 x 164 M x 4 B shard staged
    # 256 MiB at a time) and the attention output's (Megatron's dense with its bias;
    # query_key_value's goes with its weight), (25,600^2 + 25,600) / 16 x 4 B = 163,846,400 B,
    # staged whole. The weights' drive reads land in the parameter swapper's pinned buffers
    # (engine/param_swap.py), counted in both.
    timeline, engine = _peaks(runs(ZERO_INFINITY))
    assert engine - timeline == 64 * MiB * 4 + (25_600**2 + 25_600) // 16 * 4


def test_the_run_report_shows_the_host_and_keeps_the_engines_peak(runs):
    report = runs(FSDP2).report
    hm = report["host_memory_timeline"]
    dram = report["tiers"]["dram"]
    assert hm["peak_moment"] == "optimizer step" and hm["fits"]
    assert dram["engine_peak_bytes"] == 15_597_051_904
    # the larger: the engine's and the step temporaries, (2 x 16,384,000 + 512) x 4 B
    assert dram["peak_bytes"] == hm["peak_bytes"] == 15_597_051_904 + 131_074_048
    assert hm["node"] == {
        "gpus": 8,
        "gpus_per_node": 8,
        "pipeline_stages": 1,
        "capacity_bytes": 8 * 256_000_000_000,
        "peak_bytes": 8 * (15_597_051_904 + 131_074_048),
    }


# --- fits decided on the timeline ----------------------------------------------------------------


def test_zero_infinity_runs_out_in_forward_where_its_state_fits():
    """DRAM at 60 GB a GPU: the resident activations (46.98 GB) fit, the step does not. The
    swap buffers take 18,522,046,464 B at the start; each layer adds 367,001,600: after 113
    layers 59,993,222,264 B <= 60e9, the 114th (L113) would make 60,360,223,864."""
    s, inv, _ = _host(ZERO_INFINITY, "hardware.tiers.dram.capacity=60 GB")
    start = ZI_OPTIMIZER_SWAP + ZI_PARAMETER_SWAP
    assert start + 113 * ZI_LAYER <= 60e9 < start + 114 * ZI_LAYER
    report = inventory_report(s, inv, host=host_timeline(resolve(s), inv))
    hm = report["host_memory_timeline"]
    assert inv.tiers["dram"].fits  # the resident state alone would say it fits
    assert not hm["fits"] and not report["tiers"]["dram"]["fits"] and not report["fits"]
    assert hm["out_of_memory_at"] == "forward: layer 113, part 0"
    assert hm["out_of_memory_allocating"] == "offloaded activations"
    # with 66 GB it fits again (the peak is 65,498,251,264 B)
    s, inv, h = _host(ZERO_INFINITY, "hardware.tiers.dram.capacity=66 GB")
    assert inventory_report(s, inv, host=h)["host_memory_timeline"]["fits"]


def test_zero_offload_runs_out_at_the_accumulation_boundary():
    """13 GB a GPU: the start holds 8,994,166,272 of state + 2,587,808,256 of rounding +
    536,870,912 of buffer = 12,118,845,440; backward adds the fp32 gradients' extra, the rest
    first (210,055,168 / 16 = 13,128,448 parameters x 2 B = 26,256,896), then each layer
    12,586,240 x 2 = 25,172,480: 33 layers fit (12,118,845,440 + 26,256,896 + 33 x 25,172,480
    = 12,975,790,272), the 34th, L16, does not (13,000,962,752 > 13e9)."""
    start = ZO_GRADIENTS + ZO_MASTER + ZO_OPTIMIZER + ZO_ROUNDING + ZO_BUFFER
    rest, layer = (50_257 + 1_024 + 2) * 4096 // 16 * 2, (12 * 4096**2 + 13 * 4096) // 16 * 2
    assert start + rest + 33 * layer <= 13e9 < start + rest + 34 * layer
    _, inv, h = _host(ZERO_OFFLOAD, "hardware.tiers.dram.capacity=13 GB")
    assert inv.tiers["dram"].fits
    assert not h.timeline.fits
    assert h.timeline.oom_event.moment == "backward: layer 16"
    part = "fp32 gradients beyond the 16-bit ones (accumulation boundary)"
    assert h.timeline.oom_event.part == part


# --- the node ------------------------------------------------------------------------------------


def test_a_node_holding_two_pipeline_stages_says_so():
    raw = merge(
        tiny(),
        {
            "model": {"layers": 2},
            "parallel": {"pipeline": 2},
            "placement": {"master": "dram", "optimizer": "dram", "optimizer_compute": "cpu"},
        },
    )
    r = resolve(scenario(raw))
    h = host_timeline(r, build_inventory(r))
    assert (h.node_gpus, h.node_stages) == (2, 2)  # 2 GPUs, both on one 8-GPU node
    assert h.node_peak_bytes == 2 * h.timeline.peak_allocated_bytes


def test_no_section_where_the_host_holds_nothing(cli_json):
    *_, h = _host(SCENARIOS / "seed-1b-adam.yaml")
    assert h is None
    assert "host_memory_timeline" not in cli_json(SCENARIOS / "seed-1b-adam.yaml")


def test_inventory_json_has_the_hosts_section(cli_json):
    hm = cli_json(ZERO_OFFLOAD)["host_memory_timeline"]
    assert hm["peak_bytes"] == 13_403_726_336 and hm["peak_moment"] == "backward: layer 0"


def test_inventory_text_shows_the_hosts_peak_and_node(cli):
    code, out, _ = cli("inventory", ZERO_OFFLOAD)
    assert code == 0
    assert (
        "host memory (dram) over the step: peak at backward: layer 0, 13.40 GB of 96.00 GB a GPU"
        in out
    )
    assert "the node (16 GPUs)" in out


def test_run_plot_draws_the_host_panel(runs):
    from matplotlib.figure import Figure

    from tiersim.report.plot_host import TITLE, draw_host_timeline

    h = runs(ZERO_OFFLOAD).host_timeline
    fig = Figure()
    draw_host_timeline(fig.add_subplot(), h)
    (panel,) = [a for a in fig.axes if a.get_title().startswith(TITLE)]
    assert "at backward: layer 0" in panel.get_title()
    allocated, limit, peak = panel.get_lines()[:3]
    levels = [b / 1e9 for b in h.timeline.allocated]
    assert list(allocated.get_ydata()) == [*levels, levels[-1]]  # held to the step's end
    assert limit.get_ydata()[0] == 96.0
    assert peak.get_xdata()[0] == h.timeline.peak_index


def test_the_api_gives_the_host_timeline():
    from tiersim import api

    h = api.host_memory(api.load(ZERO_OFFLOAD))
    assert h.timeline.peak_allocated_bytes == 13_403_726_336
    assert api.host_memory(api.load(SCENARIOS / "seed-1b-adam.yaml")) is None
