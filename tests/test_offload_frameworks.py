"""training.framework: how DeepSpeed (ZeRO-3 / ZeRO-Offload / ZeRO-Infinity) and FSDP2 move
state, on tiny scenarios with round numbers and on the 1T model of ZeRO-Infinity. Every
expected figure is worked out here by hand from the behaviour described in
tiersim/config/framework.py (and the DeepSpeed source it cites)."""

from __future__ import annotations

import math

import pytest
from conftest import SCENARIOS
from engine_helpers import merge, scenario, tiny

from tiersim.config.framework import offload_plan
from tiersim.config.load import load_scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.engine.simulate import simulate
from tiersim.runner import Run
from tiersim.state.model import Matrix
from tiersim.state.model_shapes import UnitKind
from tiersim.state.resolved import resolve
from tiersim.workload.cpu_optimizer import cpu_update_s, partition_tensors
from tiersim.workload.fetch import bucketed, submodule_sizes
from tiersim.workload.pinned import pinned_size

GB = 1e9
MIXED = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}


def report(raw_or_scenario):
    s = raw_or_scenario if not isinstance(raw_or_scenario, dict) else scenario(raw_or_scenario)
    return Run(s).report


# --- defaults per framework ---------------------------------------------------------------------


def test_each_framework_sets_its_defaults_and_a_given_key_wins():
    base = tiny()
    generic = offload_plan(scenario(base))
    assert (generic.framework, generic.fetch, generic.boundary_gradients) == (
        "generic",
        "layer",
        "stored",
    )
    assert not generic.pin_memory and not generic.tiling and not generic.swap_gradients
    ds = offload_plan(scenario(merge(base, {"training": {"framework": "deepspeed"}})))
    # DeepSpeed's config defaults: stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters
    # 1e9, sub_group_size 1e9, offload buffer_count 4, pipeline_read/write and pin_memory off
    assert (ds.fetch, ds.prefetch_bucket_size, ds.max_live_parameters) == ("submodule", 5e7, 1e9)
    assert (ds.sub_group_size, ds.buffer_count, ds.boundary_gradients) == (1e9, 4, "fp32")
    assert not (ds.pipeline_read or ds.pipeline_write or ds.pin_memory)
    fsdp = offload_plan(scenario(merge(base, {"training": {"framework": "fsdp"}})))
    assert fsdp.fetch == "layer" and fsdp.pin_memory and fsdp.pinned_per_tensor  # CPUOffloadPolicy
    given = {"training": {"framework": "deepspeed", "offload": {"fetch": "layer", "tiling": False}}}
    over = offload_plan(scenario(merge(base, given)))
    assert (over.fetch, over.tiling, over.boundary_gradients) == ("layer", False, "fp32")


# --- fetch granularity --------------------------------------------------------------------------


def test_a_layer_splits_into_its_submodules_bucketed():
    # q (4x4), k and v (4x2 each), o (4x4), then a bias of 4 (joins o), MLP 4x8 twice, norms
    # 4 x 2 (join the last MLP matrix): 16, 8, 8, 16 + 4, 32, 32 + 8
    mats = [Matrix(4, 4), Matrix(4, 2, 2), Matrix(4, 4), Matrix(4, 1), Matrix(4, 8, 2)]
    mats.append(Matrix(4, 1, 2))
    assert submodule_sizes(mats) == [16, 8, 8, 20, 32, 40]
    # a bucket of 32 parameters gathers 16 + 8 + 8, then 20, 32, 40 each alone
    assert bucketed([16, 8, 8, 20, 32, 40], 32) == [32, 20, 32, 40]
    assert bucketed([16, 8], None) == [16, 8]


ONE_T = SCENARIOS / "zero-infinity-1t-dgx2.yaml"


def test_the_1t_model_is_refused_a_layer_at_a_time_and_runs_by_submodule():
    # h = 25,600, f = 102,400: one layer is 12h^2 + 13h = 7,864,652,800 parameters, fp16
    # weights and gradients 4 x that = 31.46 GB, with a 1 GiB workspace and the
    # checkpointed layer input over the V100's 32 GB: the generic engine refuses it.
    with pytest.raises(InfeasibleError, match="cannot hold even one layer"):
        simulate(
            load_scenario(ONE_T, ["training.framework=null", "training.workspace=1 GiB"]).scenario
        )
    # With the workspace the stack holds (PyTorch's two cuBLAS workspaces, 17,039,360 B on a
    # V100: docs/kernel-workspace.md) one layer streams, and the step's peak is over 32 GB: it
    # runs, and does not fit.
    generic = simulate(load_scenario(ONE_T, ["training.framework=null"]).scenario)
    assert generic.tiers["hbm"].peak_bytes > 32 * GB and not generic.tiers["hbm"].fits
    s = load_scenario(ONE_T, ["model.layers=2"]).scenario  # two layers: the same operators
    r = report(s)
    # Per layer, Megatron-DeepSpeed's modules (megatron/model/transformer.py): query_key_value
    # (3h^2 + 3h), dense (h^2 + h), the MLP's first matrix (hf; its bias f listed after the
    # second: joined to it) and the second with the biases and norms: hf + f + h + 4h.
    # Largest: 2,621,440,000 + 102,400 + 128,000.
    h, f = 25_600, 102_400
    assert r["offload"]["fetch_units_per_layer"] == 4
    assert r["offload"]["largest_fetch_parameters"] == h * f + f + 5 * h == 2_621_670_400
    assert r["offload"]["tiling"] == []
    assert r["tiers"]["hbm"]["peak_bytes"] <= 32 * GB and r["fits"]
    # pinned: 4 swap buffers of one sub-group (1e9 fp32 values: 4e9 B -> 2^32) and the
    # parameter swapper's 5 x 1e8 fp16 (2e8 B -> 2^28)
    assert r["offload"]["pinned_host_extra_bytes"] == 4 * 2**32 + 5 * 2**28
    # NVMe wear: fp32 gradients swapped with the optimizer state. Per GPU, 16-way: master
    # 4 B, moments 8 B, fp32 gradients 4 B a parameter of its shard: gradients are a third
    # of what the state writes
    written = r["tiers"]["nvme"]["written_by_class"]
    assert written["gradients"] == pytest.approx((written["master"] + written["optimizer"]) / 3)
    assert r["wear"]["nvme"]["lifetime_days"] > 0


def test_an_operator_too_large_for_gpu_memory_runs_in_tiles():
    # 10 GB of GPU memory: room = 10e9 - 1 GiB - the layer input (2 s b h = 2 x 1024 x 7 x
    # 25,600 = 367,001,600 B) = 8,559,256,576 B. The MLP matrices, fp16 weights and
    # gradients 4 B a parameter (10.49 GB), need 2 tiles each; query_key_value (3h^2 + 3h
    # = 1,966,156,800 parameters, 7.86 GB) and dense (2.6 GB) none: parts 2 and 3 of 4.
    over = ["model.layers=2", "hardware.tiers.hbm.capacity=10 GB"]
    r = report(load_scenario(ONE_T, over).scenario)
    tiles = [(t["operator"], t["tiles"]) for t in r["offload"]["tiling"]]
    assert tiles == [("L0.2", 2), ("L0.3", 2)]
    assert r["offload"]["fetch_units_per_layer"] == 6
    # what the engine moves fits; the step's memory timeline does not: one layer's recompute
    # working set (full recompute: the whole layer's saved set, s·b·h·(34 + 5as/h) = 1024 x 7
    # x 25,600 x 66 = 12.1 GB with Megatron's eager scores) does not fit beside the rest
    assert r["tiers"]["hbm"]["engine_peak_bytes"] <= 10 * GB
    mt = r["memory_timeline"]
    assert not r["fits"] and mt["out_of_memory_at"].startswith("backward: layer")
    assert mt["out_of_memory_allocating"] == "recompute working set"
    # its cost: against the same step untiled on a GPU memory that holds the operators whole;
    # it can be below zero: a tile's drive read is issued a use ahead (DeepSpeed's NVMe
    # parameter prefetch, engine/param_swap.py), and half an MLP's read hides under the
    # previous tile's compute where a whole one does not under the operator before it
    assert abs(r["offload"]["tiling_cost_s"]) < 0.05 * r["step"]["time_s"]


# --- DeepSpeed's gradients ----------------------------------------------------------------------


def offloaded(framework: str | None, **over) -> dict:
    """1e9 parameters, bf16 weights and gradients, fp32 master and Adam moments, gradients,
    master and moments on the host, the update on the CPU (DeepSpeed's offload_optimizer:
    ZeRO-2, as ZeRO-Offload runs it; refused at stage 0, config/deepspeed.py)."""
    stage = {"zero_stage": 2} if framework == "deepspeed" else {}
    raw = tiny(
        parallel=stage,
        training={"optimizer": "adam", "precision": MIXED, "framework": framework},
        placement={
            "gradients": "dram",
            "master": "dram",
            "optimizer": "dram",
            "optimizer_compute": "cpu",
        },
    )
    return merge(raw, over)


def test_the_cpu_optimizer_reads_fp32_gradients_across_pcie():
    # generic: the bf16 gradient, 2 B x 1e9 = 2 GB; DeepSpeed: cast to fp32 first, 4 GB
    assert report(offloaded(None))["tiers"]["dram"]["written_by_class"]["gradients"] == 2 * GB
    ds = report(offloaded("deepspeed"))
    assert ds["tiers"]["dram"]["written_by_class"]["gradients"] == 4 * GB
    assert ds["links"]["pcie"]["bytes_by_direction"]["hbm->dram"] == 4 * GB


def test_with_the_state_on_nvme_the_fp32_gradients_go_through_it():
    raw = offloaded("deepspeed", placement={"master": "nvme", "optimizer": "nvme"})
    r = report(raw)
    nvme = r["tiers"]["nvme"]
    # written: master 4 GB, moments 8 GB, gradients 4 GB (a third more); read back the same
    assert nvme["written_by_class"] == {"gradients": 4 * GB, "master": 4 * GB, "optimizer": 8 * GB}
    assert nvme["read_by_class"] == nvme["written_by_class"]
    # the DRAM peak holds 4 pinned swap buffers of 1e9 fp32 values, 2^32 B each
    assert r["offload"]["pinned_host_extra_bytes"] == 4 * 2**32
    assert r["tiers"]["dram"]["peak_bytes"] >= 4 * 2**32


def test_pinned_blocks_round_up_to_a_power_of_two():
    assert [pinned_size(n) for n in (0, 1, 3, 4, 5, 4 * 10**9)] == [0, 1, 4, 4, 8, 2**32]


# --- the update: tiles not pipelined, delayed parameter update -----------------------------------


def two_layer(mode: str, framework: str | None = None) -> dict:
    """Two 0.5e9-parameter fp32 layers (forward 0.5 s, backward 1 s each), SGD on the CPU at
    1 Gparam/s (0.5 s a layer); the update reads and writes the weights in place."""
    return tiny(
        model={"parameters": 1_000_000_000, "layers": 2, "forward_flops_per_token_per_layer": 5e8},
        placement={"optimizer_compute": "cpu"},
        training={"optimizer_step": mode, "framework": framework},
    )


def test_delayed_update_hides_the_cpu_step_under_the_next_forward_and_backward():
    # Synchronous (tests/test_engine_optimizer.py): 5.0 s, the update after backward. With
    # DPU the next step runs on the weights of the step before: its forward starts as soon
    # as this backward ends, so the period is the GPU's 3.0 s; the update (3.0-5.0) hides.
    r = simulate(scenario(two_layer("delayed")))
    assert math.isclose(r.time_s, 3.0)
    assert r.exposed_cpu_s == 0.0


def test_a_delayed_update_holds_a_second_gradient_buffer():
    # gradients homed in DRAM: 1e9 fp32 values, 4 GB, held twice with DPU
    raw = merge(two_layer("synchronous"), {"placement": {"gradients": "dram"}})
    sync = simulate(scenario(raw)).tiers["dram"].peak_bytes
    dpu = merge(raw, {"training": {"optimizer_step": "delayed"}})
    assert simulate(scenario(dpu)).tiers["dram"].peak_bytes == sync + 4 * GB


def deepspeed_tiles(zero_stage: int, sub_group_size: int | None = None):
    raw = merge(
        two_layer("synchronous", "deepspeed"),
        {
            "parallel": {"zero_stage": zero_stage},
            "training": {"offload": {}},
            "placement": {"gradients": "dram"},  # DeepSpeed's CPU optimizer takes them there
        },
    )
    if sub_group_size is not None:
        raw["training"]["offload"]["sub_group_size"] = sub_group_size
    return simulate(scenario(raw))


def test_deepspeed_sub_groups_are_read_updated_and_written_in_turn():
    # Forward 0-1, backward 1-3. Each layer's 2 GB of fp32 gradients goes to host memory as
    # its backward ends (PCIe 10 GB/s, 0.2 s; ZeRO-3's overlap_comm default: beside the next
    # backward): the second layer's 2.0-2.2, the first's from 3.0. ZeRO-3 with sub_group_size
    # 0.5e9: each layer is its own sub-group, its 2 GB of weights read, updated (SGD on the
    # CPU, 0.5 s) and written back before the next is read (pipeline_read/write off): the
    # first group's read shares PCIe's direction with the last gradient copy (4 GB at 10
    # GB/s: 3.0-3.4), update 3.4-3.9, written 3.9-4.1; then 4.1-4.3, 4.3-4.8, 4.8-5.0.
    # DeepSpeed's CPU path adds its host passes to each update: clipping (8 B a parameter) and
    # the copy back (fp32 read, fp32 written): 16 B x 0.5e9 / 1000 TB/s = 8 us a layer.
    host_passes = 2 * 16 * 0.5e9 / 1e15
    one_each = deepspeed_tiles(3, 500_000_000)
    assert math.isclose(one_each.time_s, 5.0 + host_passes)
    # the host holds both layers' gradients (4 GB) and one layer's weights (2 GB) at once
    assert one_each.tiers["dram"].peak_bytes == 6 * GB
    # The default sub_group_size (1e9) holds both layers: both read in (4 GB, 3.0-3.6 beside
    # the last gradient copy: 6 GB at 10 GB/s), updated (3.6-4.6), written back (4.6-5.0):
    # the same 5.0 s, and the host holds all 8 GB at once.
    whole = deepspeed_tiles(3)
    assert math.isclose(whole.time_s, 5.0 + host_passes)
    assert whole.tiers["dram"].peak_bytes == 8 * GB
    # ZeRO-1/2 step the whole partition in one optimizer.step() likewise; without
    # overlap_comm (ZeRO-2's default) the copies run after each backward on the compute
    # stream: 1-2, 2.0-2.2, 2.2-3.2, 3.2-3.4, then 3.4-3.8 in, 3.8-4.8, 4.8-5.2 out (and the
    # gradient path's GPU kernels, tens of microseconds here)
    zero2 = deepspeed_tiles(2)
    assert math.isclose(zero2.time_s, 5.2, rel_tol=1e-4) and zero2.time_s > 5.2 + host_passes
    assert zero2.tiers["dram"].peak_bytes == 8 * GB


def test_deepspeed_cpu_optimizer_refuses_gradients_on_the_gpu():
    raw = two_layer("synchronous", "deepspeed")  # ZeRO-2 (stage 0 refuses a CPU optimizer)
    raw = merge(raw, {"placement": {"gradients": "hbm"}, "parallel": {"zero_stage": 2}})
    with pytest.raises(InputError) as err:
        scenario(raw)
    assert "placement.gradients" in str(err.value) and "expected 'dram'" in str(err.value)
    # on the GPU's own optimizer they may stay
    scenario(merge(raw, {"placement": {"optimizer_compute": "gpu"}}))
    # nor on a GPU-side flash tier (h200-hbf's HBF links to HBM only)
    sets = ["training.framework=deepspeed", "placement.optimizer_compute=cpu"]
    sets += ["parallel.zero_stage=2"]
    sets += ["placement.optimizer=dram", "placement.master=dram"]
    with pytest.raises(InputError) as err:
        load_scenario(SCENARIOS / "default.yaml", [*sets, "placement.gradients=hbf"])
    assert "placement.gradients: 'hbf': DeepSpeed's CPU optimizer" in err.value.render()
    # host memory, or a drive behind it (ZeRO-Infinity's NVMe) is where DeepSpeed keeps them
    load_scenario(SCENARIOS / "default.yaml", [*sets, "placement.gradients=dram"])
    load_scenario(SCENARIOS / "zero-infinity-1t-dgx2.yaml")  # gradients: nvme


# --- DeepSpeed ZeRO-1/2 without overlap_comm: gradient copies on the compute stream -----------


def test_deepspeed_zero2_copies_gradients_on_the_compute_stream_by_default():
    # One 1e9-parameter fp32 layer (forward 1 s, backward 2 s), 3 micro-batches, gradients
    # on the host (4 GB a copy over 10 GB/s PCIe: 0.4 s), SGD on the GPU. DeepSpeed's
    # ZeRO-2 default overlap_comm false (zero/config.py) puts the copies on the compute
    # stream (stage_1_and_2.py reduce_ipg_grads), after each backward: F0 0-1, B0 1-3, out
    # 3-3.4; F1 3.4-4.4, B1 4.4-6.4, the host's sum in 6.4-6.8 (added on the GPU), out
    # 6.8-7.2; F2 7.2-8.2, B2 8.2-10.2, in 10.2-10.6, out 10.6-11.0; the update reads the
    # gradients (11.0-11.4) and takes 12 B a parameter at 1000 TB/s (12 us). The gradient
    # path's kernels run in the same stream, per fp32 element: the bucket copy and division
    # 16 B each micro-batch, the add of the sum read back 12 B from the second, the
    # boundary's norm, overflow check and cast 12 + 28 B: 3 x 16 + 2 x 12 + 40 = 112 B.
    def run(overlap_comm):
        offload = {} if overlap_comm is None else {"overlap_comm": overlap_comm}
        raw = tiny(
            training={"grad_accumulation": 3, "framework": "deepspeed", "offload": offload},
            parallel={"zero_stage": 2},
            placement={"gradients": "dram"},
        )
        return simulate(scenario(raw))

    default = run(None)
    assert math.isclose(default.time_s, 11.4 + 12e9 / 1e15 + 112e9 / 1e15)
    assert math.isclose(default.exposed_transfer_s, 0.4 + 0.8 + 0.8 + 0.4)
    # overlap_comm on: each read-back still waits for its micro-batch's forward (one layer:
    # nothing earlier to prefetch under) and costs 0.4 s before backward, but the copies out
    # hide under the next forward: 0.8 s less
    assert math.isclose(run(True).time_s, 10.6 + 12e9 / 1e15)
    # what the report says it did: DeepSpeed's rule, off below ZeRO-3, on at ZeRO-3
    zero2 = tiny(training={"framework": "deepspeed"}, parallel={"zero_stage": 2})
    assert report(zero2)["offload"]["overlap_comm"] is False
    assert report(merge(zero2, {"parallel": {"zero_stage": 3}}))["offload"]["overlap_comm"]


def test_deepspeed_copies_activation_checkpoints_to_the_host_in_stream_order():
    # Two 0.5e9-parameter layers (forward 0.5 s, backward 1 s each), 2 GB of checkpoints a
    # layer kept on the host (0.2 s each way over 10 GB/s). DeepSpeed's cpu_checkpointing
    # copies them with plain .to() calls (activation_checkpointing/checkpointing.py), so the
    # GPU waits: F0 0-0.5, out 0.5-0.7, F1 0.7-1.2, out 1.2-1.4, back 1.4-1.6, B1 1.6-2.6,
    # back 2.6-2.8, B0 2.8-3.8. The generic engine copies beside compute: F0 0-0.5 (out
    # 0.5-0.7 beside F1), F1 0.5-1.0, out 1.0-1.2, back 1.2-1.4, B1 1.4-2.4 (layer 0's
    # checkpoint back beside it), B0 2.4-3.4. Both then take the same update.
    def run(framework):
        raw = tiny(
            model={
                "parameters": 1_000_000_000,
                "layers": 2,
                "forward_flops_per_token_per_layer": 5e8,
                "activation_bytes_per_layer": "2 GB",
            },
            training={"framework": framework},
            parallel={"zero_stage": 2},
            placement={"activations": "dram"},
        )
        return simulate(scenario(raw))

    deepspeed, generic = run("deepspeed"), run(None)
    assert math.isclose(deepspeed.time_s - generic.time_s, 3.8 - 3.4)
    assert math.isclose(deepspeed.exposed_transfer_s, 4 * 0.2)
    assert math.isclose(generic.exposed_transfer_s, 2 * 0.2)


# --- FSDP2: gradients accumulated on the host ---------------------------------------------------


def test_fsdp2_adds_gradients_on_the_host_and_backward_waits_for_the_copy():
    # One 1e9-parameter fp32 layer (forward 1 s, backward 2 s), 3 micro-batches, gradients on
    # the host (4 GB a copy over 10 GB/s PCIe: 0.4 s), host memory 100 GB/s, SGD on the GPU.
    # FSDP2 (torch 2.13 _fsdp_collectives.py foreach_reduce): micro-batch 0's copy to pinned
    # memory overlaps (F0 0-1, B0 1-3, copy 3-3.4 beside F1 3-4); from micro-batch 1 on the
    # copy is blocking and the CPU adds it to the host's gradient (read two, write one:
    # 12 GB / 100 GB/s = 0.12 s) before the next kernel is launched: B1 4-6, copy 6-6.4, add
    # 6.4-6.52, F2 6.52-7.52, B2 7.52-9.52, copy 9.52-9.92, add 9.92-10.04; the update reads
    # the gradients back (10.04-10.44) and takes 12 B a parameter at 1000 TB/s (12 us).
    raw = tiny(
        training={"grad_accumulation": 3, "framework": "fsdp"},
        placement={"gradients": "dram"},
        hardware={"cpu": {"memory_bandwidth": "100 GB/s"}},
    )
    r = simulate(scenario(raw))
    assert math.isclose(r.time_s, 10.44 + 12e9 / 1e15)
    assert math.isclose(r.exposed_transfer_s, 3 * 0.4)  # two blocking copies, the update's read
    assert math.isclose(r.exposed_cpu_s, 2 * 0.12)
    # nothing read back to the GPU to accumulate: only the update's 4 GB cross to it
    assert r.links["pcie"].bytes_by_direction == {"hbm->dram": 12 * GB, "dram->hbm": 4 * GB}
    generic = simulate(scenario(merge(raw, {"training": {"framework": None}})))
    assert generic.links["pcie"].bytes_by_direction["dram->hbm"] == 12 * GB  # read back twice


# --- the CPU path in parts ------------------------------------------------------------------------


def test_the_cpu_path_is_the_kernel_clipping_copy_back_and_the_rest():
    # Ma and Wang's 1.5B run, one rank: 771,857,152 parameters; kernel 2.042 Gparam/s;
    # clipping 8 B and the fp32 -> bf16 copy back 4 + 2 B a parameter at 204.8 GB/s; the
    # rest 1.901 ms for each of the rank's 169 parameter tensors (338 / 2 ranks; the kernel's
    # 28 B a parameter, 0.106 s, does not bind).
    s = load_scenario(SCENARIOS / "published" / "ma2025-qwen2.5-1.5b-zero-offload.yaml").scenario
    p = 771_857_152
    by_hand = p / 2.042e9 + p * 14 / 204.8e9 + 169 * 1.901e-3
    assert by_hand == pytest.approx(0.7520, abs=1e-4)
    got = cpu_update_s(resolve(s), offload_plan(s), p, 28 * p, 169)
    assert got == pytest.approx(by_hand, rel=1e-12)
    assert simulate(s).optimizer_s == pytest.approx(by_hand, rel=1e-9)


def _tensors(r) -> float:
    return sum(
        u.count * partition_tensors(r, u.matrices, u.kind == UnitKind.LAYER, 1.0) for u in r.units
    )


def test_parameter_tensors_are_counted_as_the_models_code_holds_them():
    # Qwen2.5-1.5B (transformers' Qwen2): per layer q, k, v, o weights, q, k, v biases, gate,
    # up, down, 2 RMSNorm weights = 12; 28 layers + the tied embedding + the final norm = 338
    ma = load_scenario(SCENARIOS / "published" / "ma2025-qwen2.5-1.5b-zero-offload.yaml")
    assert _tensors(resolve(ma.scenario)) == 28 * 12 + 1 + 1 == 338
    # Ren's 1B GPT-2 (Megatron-LM v1, mpu/transformer.py): per layer input_layernorm (w, b),
    # query_key_value fused (w, b), dense (w, b), post_attention_layernorm (w, b),
    # dense_h_to_4h (w, b), dense_4h_to_h (w, b) = 12; 20 layers + word and position
    # embeddings + the final layernorm (w, b) = 244 (16 a layer if q, k, v were apart)
    ren = load_scenario(SCENARIOS / "published" / "ren2021-zero-offload-1b.yaml")
    assert _tensors(resolve(ren.scenario)) == 20 * 12 + 2 + 2 == 244


def test_the_per_tensor_overhead_is_per_tensor_of_the_partition_once_a_step():
    # Ren's 1B run, one GPU (the whole partition): 244 tensors x 1.901 ms = 0.4638 s a step,
    # whatever its 16 micro-batches (ZeRO-2's per-parameter work runs at the boundary only)
    path = SCENARIOS / "published" / "ren2021-zero-offload-1b.yaml"
    on = simulate(load_scenario(path).scenario)
    off = simulate(load_scenario(path, ["hardware.cpu.path_overhead_per_tensor=0 ms"]).scenario)
    assert on.optimizer_s - off.optimizer_s == pytest.approx(244 * 1.901e-3, rel=1e-9)
    # Ma and Wang's 3B run, 2 ranks: 36 x 12 + 2 = 434 tensors, 217 a rank: 0.4125 s (as a
    # rate fitted per parameter it was 1,542,969,344 / 2.402 Gparam/s = 0.642 s)
    path = SCENARIOS / "published" / "ma2025-qwen2.5-3b-zero-offload.yaml"
    on = simulate(load_scenario(path).scenario)
    off = simulate(load_scenario(path, ["hardware.cpu.path_overhead_per_tensor=0 ms"]).scenario)
    assert on.optimizer_s - off.optimizer_s == pytest.approx(217 * 1.901e-3, rel=1e-9)
    # without a framework's path in parts it is not charged (the single fitted rate is)
    generic = ["training.framework=null"]
    a = simulate(load_scenario(path, generic).scenario)
    b = simulate(
        load_scenario(path, [*generic, "hardware.cpu.path_overhead_per_tensor=0 ms"]).scenario
    )
    assert a.optimizer_s == b.optimizer_s


@pytest.mark.parametrize("name", ["zero-offload-10b-dgx2.yaml", "fsdp2-cpu-offload-llama2-7b.yaml"])
def test_the_shipped_offload_scenarios_fit_and_say_what_their_framework_did(name):
    s = load_scenario(SCENARIOS / name).scenario
    r = report(s)
    assert r["fits"] and r["offload"]["framework"] == s.training.framework
    if s.training.framework == "fsdp":  # every sharded host tensor pinned on its own
        assert r["offload"]["fetch_units_per_layer"] == 1
        assert r["offload"]["pinned_host_extra_bytes"] > 0
