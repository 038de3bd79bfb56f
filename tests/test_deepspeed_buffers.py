"""DeepSpeed's gradient reduce bucket (the "ipg" buffer) under a release before 0.3.17
(`training.deepspeed.version`, config/deepspeed.py) and ZeRO-Offload's GPU gradient buffer in
GPU memory, counted by hand: elements x bytes, in the `workspace` class and so in the HBM
peak (state/buffers.py). (From 0.3.17: tests/test_deepspeed_default_bucket.py.)

ZeRO-1/2 as v0.3's stage2.py: `torch.empty(int(reduce_bucket_size * 4.5), dtype=torch.half)`
in backward(), a second with overlap_comm; ZeRO-3's stage3.py: one flat buffer of
reduce_bucket_size elements in the gradients' 16-bit dtype."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS
from engine_helpers import merge, scenario, tiny

from tiersim.config.load import load_scenario
from tiersim.engine.simulate import simulate
from tiersim.runner import Run
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

BUCKET = 10_000_000  # elements
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}


V03 = "0.3.16"  # the last release with v0.3's 4.5x bucket


def _raw(framework, zero: int, bucket: int | None, version=V03, **offload) -> dict:
    """tiny's 1e9 parameters (its workspace 0 B: the class is the buffer alone), bf16."""
    training = {"framework": framework, "precision": BF16, "optimizer": "adam"}
    training["deepspeed"] = {"version": version}
    training["offload"] = {"reduce_bucket_size": bucket, **offload}
    return tiny(training=training, parallel={"data": 2, "zero_stage": zero})


def _workspace(raw: dict) -> int:
    return build_inventory(resolve(scenario(raw))).per_gpu["workspace"]


def _hbm_peak(raw: dict) -> int:
    return simulate(scenario(raw)).tiers["hbm"].peak_bytes


def test_zero2_counts_four_and_a_half_buckets_of_fp16():
    # 1e7 x 4.5 = 45,000,000 elements x 2 B (torch.half) = 90,000,000 B; overlap_comm is
    # off by default at ZeRO-1/2: one buffer
    raw = _raw("deepspeed", 2, BUCKET)
    assert _workspace(raw) == 90_000_000
    # twice the bucket: the whole difference in the HBM peak is the buffer's 90,000,000 B more
    assert _hbm_peak(_raw("deepspeed", 2, 2 * BUCKET)) - _hbm_peak(raw) == 90_000_000
    # left out, v0.3's default bucket (stage2.py `reduce_bucket_size=500000000`):
    # 5e8 x 4.5 x 2 B = 4,500,000,000 B
    assert _workspace(_raw("deepspeed", 2, None)) == 4_500_000_000


def test_zero1_counts_it_too_and_overlap_comm_doubles_it():
    assert _workspace(_raw("deepspeed", 1, BUCKET)) == 90_000_000
    # "double buffers to avoid data access conflict when overlap_comm is enabled": 2 x 9e7
    doubled = _raw("deepspeed", 2, BUCKET, overlap_comm=True)
    assert _workspace(doubled) == 180_000_000
    twice = _raw("deepspeed", 2, 2 * BUCKET, overlap_comm=True)
    assert _hbm_peak(twice) - _hbm_peak(doubled) == 180_000_000


def test_zero3_counts_one_bucket_in_the_gradient_dtype():
    # stage3.py's __ipg_bucket_flat_buffer: 1e7 elements x 2 B (bf16) = 20,000,000 B
    assert _workspace(_raw("deepspeed", 3, BUCKET)) == 20_000_000
    fp32 = merge(_raw("deepspeed", 3, BUCKET), {"training": {"precision": {"gradients": "fp32"}}})
    assert _workspace(fp32) == 40_000_000  # 1e7 x 4 B


@pytest.mark.parametrize(
    "framework, zero, bucket",
    [
        ("deepspeed", 2, "latest"),  # today's release: a timeline part, not the workspace
        ("deepspeed", 0, BUCKET),  # no ZeRO optimizer, no ipg buffer
        ("fsdp", 2, BUCKET),  # not DeepSpeed's key there
        (None, 2, BUCKET),  # the generic engine
    ],
)
def test_no_buffer_where_deepspeed_allocates_none(framework, zero, bucket):
    if bucket == "latest":
        assert _workspace(_raw(framework, zero, BUCKET, version="latest")) == 0
        return
    assert _workspace(_raw(framework, zero, bucket)) == 0


def test_the_buffer_adds_to_training_workspace():
    raw = merge(_raw("deepspeed", 2, BUCKET), {"training": {"workspace": "1 GiB"}})
    assert _workspace(raw) == 2**30 + 90_000_000


def test_zero_offloads_published_runs_hold_the_450_mb_buffer():
    # ren2021: reduce_bucket_size 5e7 at ZeRO-2, overlap_comm off: 5e7 x 4.5 x 2 B = 450 MB
    # beside PyTorch's two cuBLAS workspaces (a V100, no kernel table: 2 x (4096 x 1024 x 2 +
    # 16 x 1024 x 8) = 17,039,360 B, docs/kernel-workspace.md), in the inventory and the peak
    path = SCENARIOS / "published" / "ren2021-zero-offload-1b.yaml"
    with_bucket = load_scenario(path).scenario
    # the same run counted by today's release: the bucket leaves the workspace (a timeline
    # part of 5e7 x 2 B from the first gradient, not in the engine's peak)
    without = load_scenario(path, ["training.deepspeed.version=latest"]).scenario
    # and ZeRO-Offload's GPU gradient buffer (below): its largest tensor, the 50,257 x 2,048
    # word embedding, in fp16: 205,852,672 B
    offload_buffer = 50_257 * 2_048 * 2
    assert offload_buffer == 205_852_672
    assert build_inventory(resolve(with_bucket)).per_gpu["workspace"] == (
        17_039_360 + 450_000_000 + offload_buffer
    )
    peak = simulate(with_bucket).tiers["hbm"].peak_bytes
    assert peak - simulate(without).tiers["hbm"].peak_bytes == 450_000_000


def test_the_buffer_leaves_less_room_for_an_operator_so_it_tiles():
    # The 1T model (test_offload_frameworks) on 12 GB: room for an operator 12e9 - 1 GiB -
    # the layer input 367,001,600 B = 10,559,256,576 B, which holds the MLP's matrices of
    # 2,621,440,000 and 2,621,670,400 parameters at 4 B (fp16 weights and gradients):
    # 10,485,760,000 and 10,486,681,600 B, no tiles. ZeRO-3 with reduce_bucket_size 1e8 under
    # a release before 0.3.17 (the bucket in the workspace class):
    # 1e8 x 2 B (fp16) = 200,000,000 B less room, 10,359,256,576 B: 2 tiles each
    path = SCENARIOS / "zero-infinity-1t-dgx2.yaml"
    # (the former 1 GiB workspace set, as this arithmetic was written with it)
    over = ["model.layers=2", "hardware.tiers.hbm.capacity=12 GB", "training.workspace=1 GiB"]
    # (Megatron's GPT holds query_key_value, dense and the two MLP matrices: parts 2 and 3)
    cases = (("null", "latest", []), ("100000000", V03, [("L0.2", 2), ("L0.3", 2)]))
    for bucket, version, tiles in cases:
        key = f"training.offload.reduce_bucket_size={bucket}"
        s = load_scenario(path, [*over, key, f"training.deepspeed.version={version}"]).scenario
        r = Run(s).report
        assert [(t["operator"], t["tiles"]) for t in r["offload"]["tiling"]] == tiles


# --- ZeRO-Offload's temp_grad_buffer_for_gpu_offload -------------------------------------------
# ZeRO-1/2 with the optimizer on the CPU: torch.zeros(largest_param_numel) on the GPU in the
# 16-bit weights' dtype (stage2.py v0.3 `.half()`, stage_1_and_2.py `dtype=self.dtype`), the
# largest parameter tensor the rank holds. GPT-2 (124M): its word embedding, 50,257 x 768 =
# 38,597,376 elements, beats the MLP's 768 x 3,072 = 2,359,296 and everything else.
GPT2_WTE = 50_257 * 768
assert GPT2_WTE == 38_597_376


def _offloaded(**over) -> dict:
    """GPT-2 under DeepSpeed ZeRO-2 with Adam on the CPU (tiny's machine, workspace 0 B)."""
    raw = tiny(
        training={"framework": "deepspeed", "precision": BF16, "optimizer": "adam"},
        parallel={"data": 2, "zero_stage": 2},
        placement={"gradients": "dram", "master": "dram", "optimizer": "dram"},
    )
    raw["placement"]["optimizer_compute"] = "cpu"
    raw["model"] = {"preset": "gpt2"}
    return merge(raw, over)


def test_zero_offload_holds_the_largest_tensor_s_gradient_on_the_gpu():
    raw = _offloaded()
    assert _workspace(raw) == GPT2_WTE * 2  # bf16: 77,194,752 B
    inv = build_inventory(resolve(scenario(raw)))
    assert inv.tiers["hbm"].classes["workspace"] == 77_194_752  # in GPU memory, all step
    assert _workspace(merge(raw, {"parallel": {"zero_stage": 1}})) == 77_194_752
    # the weights' dtype: fp32 weights, 4 B an element (stage_1_and_2.py's self.dtype)
    fp32 = {"training": {"precision": {"weights": "fp32", "gradients": "fp32"}}}
    assert _workspace(merge(raw, fp32)) == GPT2_WTE * 4
    # the rank's own slice under tensor parallelism: the vocab-parallel embedding's
    # ceil(50,257 / 2) = 25,129 rows x 768 = 19,299,072 elements
    assert _workspace(merge(raw, {"parallel": {"tensor": 2}})) == 25_129 * 768 * 2


@pytest.mark.parametrize(
    "over",
    [
        {"parallel": {"zero_stage": 3}},  # stage3.py: no such buffer (its own are not this)
        {"training": {"framework": "fsdp"}},  # not DeepSpeed
    ],
)
def test_no_offload_gradient_buffer_where_deepspeed_allocates_none(over):
    assert _workspace(_offloaded(**over)) == 0


def test_no_offload_gradient_buffer_with_the_optimizer_on_the_gpu_or_no_tensor_shapes():
    on_gpu = _offloaded()
    on_gpu["placement"] = {**on_gpu["placement"], "optimizer_compute": "gpu"}
    assert _workspace(on_gpu) == 0
    # a model given by its parameter count: its tensors are not known, none counted
    generic = _offloaded()
    generic["model"] = tiny()["model"]
    assert _workspace(generic) == 0


# --- its host twin, temp_grad_buffer_for_cpu_offload ---------------------------------------------
# The same elements in 16-bit on the host (stage_1_and_2.py pins it where cpu_offload_pin_memory
# is; v0.3's stage2.py always), in `offload.pinned_host_extra_bytes` and the host tier.


def _host_extra(raw: dict) -> int:
    s = scenario(raw)
    return Run(s).report["offload"]["pinned_host_extra_bytes"]


def test_zero_offload_holds_the_largest_tensor_s_gradient_on_the_host_too():
    # pin_memory off (DeepSpeed's default): nothing else is pinned or rounded here (no flash),
    # so the extra host memory is the buffer alone, 38,597,376 x 2 B
    raw = _offloaded()
    assert _host_extra(raw) == 77_194_752
    # held all step: the host tier's resident bytes, against the same state updated on the
    # GPU (no buffer at all; its peak differs by the CPU path's own transient copies too)
    resident = simulate(scenario(raw)).tiers["dram"].resident_bytes
    on_gpu = merge(raw, {"placement": {"optimizer_compute": "gpu"}})
    assert resident - simulate(scenario(on_gpu)).tiers["dram"].resident_bytes == 77_194_752
    # pinned: the caching host allocator's block, the next power of two, 2^27 = 134,217,728
    # (2^26 = 67,108,864 is short); the other pinned copies' rounding is the same both ways
    pinned = {"training": {"offload": {"pin_memory": True}}}
    assert _host_extra(merge(raw, pinned)) - _host_extra(merge(on_gpu, pinned)) == 2**27
