"""DeepSpeed ZeRO++ hpZ under parameter offload, its secondary partition's lifetime and
padding, and qgZ on transformers 5's fused experts (state/zeropp.py, engine/hpz_offload.py,
workload/zeropp.py; docs/zero-plus-plus.md): bytes by hand from DeepSpeed's source, on GPT-2
small over 16 GPUs (two DGX H100 nodes), as tests/test_zeropp.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import merge, scenario
from test_zeropp import BASE

from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.engine.host_memory import host_timeline
from tiersim.engine.schedule import build_schedule
from tiersim.engine.simulate import prepare, simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.layers import Matrix
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.zeropp import SECONDARY, secondary_weight_bytes
from tiersim.workload.zeropp import qgz_sent, qgz_shapes

# GPT-2 small on 16 GPUs, bf16: a layer 7,087,872 values; its primary partition 442,992 values
# (885,984 B), its secondary (h = 8) 885,984 values (1,771,968 B). The rest (wte, wpe, ln_f:
# 39,385,344 values) 2,461,584 and 4,923,168 values: 4,923,168 B and 9,846,336 B. Every
# tensor's values divide by 16 (768 = 2^8 x 3 divides them all): no padding. The whole
# primary 15,554,976 B, the whole secondary 31,109,952 B.
LAYER_SEC, REST_SEC, PRIMARY, SECONDARY_ALL = 1_771_968, 9_846_336, 15_554_976, 31_109_952
LAYER_PRI, REST_PRI = 885_984, 4_923_168


def _raw(m: int = 2, weights: str = "dram", **deepspeed) -> dict:
    extra = {"training": {"deepspeed": deepspeed, "grad_accumulation": m}}
    return merge(BASE, {**extra, "placement": {"weights": weights}})


@pytest.fixture(scope="module")
def offloaded() -> dict:
    """One step of each, weights homed in host memory (offload_param cpu), 2 micro-batches."""
    return {
        "base": simulate(scenario(_raw())),
        "hpz": simulate(scenario(_raw(zero_hpz_partition_size=8))),
    }


def _pcie(result, direction: str) -> int:
    return result.links["pcie"].bytes_by_direction.get(direction, 0)


def test_hpz_offload_pcie_bytes_by_hand(offloaded):
    base, hpz = offloaded["base"], offloaded["hpz"]
    # The engine's uses per micro-batch: forward L0..L11 then the rest, backward the rest then
    # L11..L0. GPT-2 small (124 M values) is under stage3_max_reuse_distance (1e9): DeepSpeed's
    # coordinator keeps every layer from its forward to its backward (tests/
    # test_deepspeed_reuse.py), and the rest is used twice in a row: no backward fetches.
    # Nothing is held over the micro-batch boundary (the trace ends with the backward: L0 is
    # released, micro-batch 1's forward fetches it again), but for the persistent parameters
    # (GPT-2's vectors, at most 1e5 values: gathered once a step, stage3.py `_post_step`, kept
    # all step; below). Without hpZ, each fetch copies the primary partition to the GPU:
    # micro-batch 0 15,554,976, micro-batch 1 the same less the persistent vectors' primary,
    # a layer's 9,984 x 2 / 16 = 1,248 B and ln_f's 1,536 x 2 / 16 = 192 B: 15,539,808
    assert 12 * 1_248 + 192 == 15_168
    assert _pcie(base, "dram->hbm") == 2 * PRIMARY - 15_168 == 31_094_784
    # hpZ: the first forward copies the primary (_all_gather_dtype: ds_tensor.to(device)),
    # every later fetch the secondary (ds_secondary_tensor.to(device)), d/h = 2 times it,
    # less the persistent vectors' (LAYER_REL, REST_REL below): mb0 forward 15,554,976; mb1
    # forward 12 layers and the rest 21,233,664 + 9,845,952
    fetched = PRIMARY + 12 * LAYER_REL + REST_REL
    assert _pcie(hpz, "dram->hbm") == fetched == 46_634_592
    # back to the host: the updated weights (15,554,976, both) and, with hpZ, every release's
    # copy into the host's secondary (_partition_param_sec) of the parameters it releases:
    # each of the 13 units released once a micro-batch, after its backward (the layers kept
    # over their forward's release), but for its persistent vectors (ds_persist: no use
    # releases them): 2 x (12 x 1,769,472 + 9,845,952) = 2 x 31,079,616; theirs (30,336)
    # once a step, by step's _partition_all_parameters (release_and_reset_all) before the
    # update: one copy of the persistent secondary, not one a micro-batch
    assert _pcie(base, "hbm->dram") == PRIMARY
    written = 2 * (12 * LAYER_REL + REST_REL) + PERSISTENT
    assert written == 2 * (12 * LAYER_SEC + REST_SEC) - PERSISTENT
    assert _pcie(hpz, "hbm->dram") == PRIMARY + written == 77_744_544
    # the secondary in host memory, not in HBM (torch.empty(device=remote_device))
    assert hpz.tiers["dram"].peak_bytes - base.tiers["dram"].peak_bytes == SECONDARY_ALL
    assert hpz.tiers["hbm"].peak_bytes == base.tiers["hbm"].peak_bytes


def test_persistent_secondary_written_once_after_the_last_backward():
    # each unit's persistent vectors' secondary (a layer's 13 x 768 = 9,984 values, / 8 x 2 =
    # 2,496 B; ln_f's 1,536 values, 384 B) copied home once, after the step's last backward
    # (micro-batch 1's L0) and before the first optimizer op: _partition_all_parameters
    r = resolve(scenario(_raw(zero_hpz_partition_size=8)))
    setup = prepare(r, build_inventory(r))
    ops = build_schedule(r, setup.wl, 1, setup.depth).ops
    labels = [str(op.label) for op in ops]
    once = [k for k, x in enumerate(labels) if x.startswith("write hpz persistent secondary")]
    assert [ops[k].nbytes for k in once] == [2_496] * 12 + [384]
    assert sum(ops[k].nbytes for k in once) == PERSISTENT
    last_backward = max(k for k, x in enumerate(labels) if x.startswith("backward "))
    first_update = min(k for k, x in enumerate(labels) if x.startswith("optimizer "))
    assert labels[last_backward] == "backward L0 mb1"
    assert last_backward < min(once) and max(once) < first_update


def _hpz_events(timeline) -> list[tuple[str, int, bool]]:
    return [(e.moment, e.nbytes, e.alloc) for e in timeline.events if e.part == SECONDARY]


# Persistent parameters (at most stage3_param_persistence_threshold, 1e5 values): GPT-2's
# vectors, a layer's 13 x 768 = 9,984 values (secondary 9,984 / 8 x 2 = 2,496 B), ln_f's
# 1,536 (384 B): 12 x 2,496 + 384 = 30,336 B; never released in the passes, their secondary is
# made by step's _partition_all_parameters. The rest a layer 1,771,968 - 2,496 = 1,769,472 B,
# the embeddings' 9,846,336 - 384 = 9,845,952 B.
LAYER_REL, REST_REL, PERSISTENT = 1_769_472, 9_845_952, 30_336
BEFORE, AFTER = "optimizer step: _partition_all_parameters", "optimizer step: _post_step"


def test_host_timeline_holds_the_secondary_from_the_first_forward_to_the_update():
    # one micro-batch: the timeline's forward is the step's first, which makes it unit by
    # unit; _post_step frees it after the update (stage3.py step: after the sub-group loop)
    r = resolve(scenario(_raw(1, zero_hpz_partition_size=8)))
    t = host_timeline(r, build_inventory(r)).timeline
    events = _hpz_events(t)
    made = [e for e in events if e[2]]
    assert made[:2] == [
        ("forward: layer 0", LAYER_REL, True),
        ("forward: layer 1", LAYER_REL, True),
    ]
    assert made[-2:] == [
        ("forward: embeddings and head", REST_REL, True),
        (BEFORE, PERSISTENT, True),
    ]
    assert sum(n for _, n, _ in made) == 12 * LAYER_REL + REST_REL + PERSISTENT == SECONDARY_ALL
    freed = [e for e in events if not e[2]]
    assert {m for m, _, _ in freed} == {AFTER}
    assert sum(n for _, n, _ in freed) == SECONDARY_ALL
    resident = [e for e in t.events if e.part == "resident weights"]
    assert [e.nbytes for e in resident] == [PRIMARY]  # the primary alone at the start
    assert t.peak_allocated_bytes == PRIMARY + SECONDARY_ALL == 46_664_928
    # two micro-batches: the last's timeline starts with the first's secondary made
    r = resolve(scenario(_raw(2, zero_hpz_partition_size=8)))
    events = _hpz_events(host_timeline(r, build_inventory(r)).timeline)
    released = 12 * LAYER_REL + REST_REL
    assert released == 31_079_616
    assert events == [
        ("start of the step", released, True),
        (BEFORE, PERSISTENT, True),
        (AFTER, released, False),
        (AFTER, PERSISTENT, False),
    ]


def test_gpu_timeline_holds_it_through_the_update():
    r = resolve(scenario(_raw(1, "hbm", zero_hpz_partition_size=8)))
    t = gpu_timeline(r, build_inventory(r))
    events = _hpz_events(t)
    assert events[0] == ("forward: embeddings", REST_REL, True)  # released after its forward
    assert events[1] == ("forward: layer 0", LAYER_REL, True)
    i = next(k for k, e in enumerate(t.events) if e.part == SECONDARY and not e.alloc)
    # the last event before _post_step is the update's: it ran with all 31,109,952 B held
    assert t.events[i - 1].phase == "optimizer"
    assert t.allocated[i - 1] - t.allocated[-1] == SECONDARY_ALL
    r0 = resolve(scenario(_raw(1, "hbm")))
    t0 = gpu_timeline(r0, build_inventory(r0))
    # so the update's peak is the one without hpZ plus the whole secondary
    opt = [a for a, e in zip(t.allocated, t.events, strict=True) if e.phase == "optimizer"]
    opt0 = [a for a, e in zip(t0.allocated, t0.events, strict=True) if e.phase == "optimizer"]
    assert max(opt) - max(opt0) == SECONDARY_ALL


def test_secondary_padding_per_tensor_by_hand():
    # partition_parameters.py: secondary_partition_size = _aligned_size // h, the tensor's
    # values padded up to a multiple of d = 16; h = 8; bf16
    r = resolve(scenario(_raw(zero_hpz_partition_size=8)))
    # a 1-D tensor of 1,000: ceil(1,000 / 16) = 63, 63 x 16 = 1,008, / 8 = 126 values, 252 B
    # (the whole divided by 8 would be 125)
    assert secondary_weight_bytes(r, [Matrix(1000, 1)]) == 252
    # three 10 x 6 tensors: 60 -> 64 -> 8 values each, 24 values, 48 B
    assert secondary_weight_bytes(r, [Matrix(10, 6, 3)]) == 48
    # 3 experts' gate, up and down (10 x 6 each): 9 tensors of 60 under megatron, 9 x 8 x 2 =
    # 144 B; transformers 5 fuses them (huggingface): gate_up [3, 12, 10] = 360 values ->
    # ceil(360 / 16) = 23 -> 368 / 8 = 46; down [3, 10, 6] = 180 -> 12 -> 192 / 8 = 24;
    # 70 values, 140 B
    experts = [Matrix(10, 6, 9, expert=True, down_every=3)]
    mega = merge(_raw(zero_hpz_partition_size=8), {"training": {"implementation": "megatron"}})
    hf = merge(_raw(zero_hpz_partition_size=8), {"training": {"implementation": "huggingface"}})
    assert secondary_weight_bytes(resolve(scenario(mega)), experts) == 144
    assert secondary_weight_bytes(resolve(scenario(hf)), experts) == 140
    assert secondary_weight_bytes(resolve(scenario(_raw())), experts) == 0  # no hpZ


def test_qgz_fused_experts_are_3d_by_hand():
    # all_to_all_quant_reduce: a tensor not 1-D whose numel divides by 2W is quantized in
    # max(shape[0], shape[1], W) groups; a fused tensor [E, rows, cols] gives E and rows.
    # 128 experts, h = 2,048, f = 768 (Qwen3-30B-A3B's), W = 16 over 2 nodes of L = 8:
    experts = [Matrix(2048, 768, 3 * 128, expert=True, down_every=3)]
    hf = merge(_raw(zero_quantized_gradients=True), {"training": {"implementation": "huggingface"}})
    r = resolve(scenario(hf))
    # gate_up [128, 1,536, 2,048]: n = 402,653,184, G = 1,536: intra n/2 + 4 G =
    # 201,332,736; inter n/16 + 4 (G // 8) = 25,165,824 + 768 = 25,166,592
    # down [128, 2,048, 768]: n = 201,326,592, G = 2,048: intra 100,663,296 + 8,192 =
    # 100,671,488; inter 12,582,912 + 1,024 = 12,583,936
    shapes = qgz_shapes(r, experts)
    assert shapes == ((128, 1536, 402_653_184, 1), (128, 2048, 201_326_592, 1))
    nvlink, network, fallback = qgz_sent(r, shapes, 2.0)
    assert nvlink == (201_332_736 + 100_671_488) * 7 / 8 == 264_253_696
    assert network == (25_166_592 + 12_583_936) / 2 == 18_875_264
    assert fallback == 0
    # under megatron, 384 tensors of 2,048 x 768 (G = 2,048): 384 x (786,432 + 8,192) x 7/8
    mega = merge(_raw(zero_quantized_gradients=True), {"training": {"implementation": "megatron"}})
    nvlink, _, _ = qgz_sent(r, qgz_shapes(resolve(scenario(mega)), experts), 2.0)
    assert nvlink == 384 * 794_624 * 7 / 8


def test_hpz_with_weights_on_nvme_exits_2():
    # offload_param nvme: _partition_param_sec's torch.empty(device='nvme') fails
    with pytest.raises(InputError) as refused:
        build(_raw(weights="nvme", zero_hpz_partition_size=8), Path("."), "t.yaml")
    assert "placement.weights" in str(refused.value)
    assert "E-CONFLICT" in str(refused.value)
    build(_raw(weights="nvme"), Path("."), "t.yaml")  # without hpZ: as before


def test_the_planners_bounds_hold_the_hpz_offload_step():
    # plan/upper.py counts hpZ's copies (a fetch of the secondary, each release's write home),
    # plan/bound.py the first forward's gather at least: the simulated step between them
    from test_plan_bound import bounds_and_run

    bound, step, upper, period = bounds_and_run(scenario(_raw(zero_hpz_partition_size=8)))
    assert 0 < bound <= step
    assert period <= upper


def test_pinned_secondary_rounded_tensor_by_tensor():
    # offload_param.pin_memory: _partition_param_sec pins each secondary tensor on its own
    # (`.pin_memory()`), the caching host allocator rounding each to a power of two; the
    # primary partition stays one flat block as before: 15,554,976 -> 16,777,216, +1,222,240.
    # The secondary's tensors as Megatron-DeepSpeed holds GPT-2's (query_key_value one
    # [2,304, 768] weight and one [2,304] bias; n / 8 values x 2 B = n / 4 bytes):
    # 12 of 768 x 2,304 (442,368 B -> 524,288, +81,920): 983,040
    # 12 of 768 x 768 (out: 147,456 B -> 262,144, +114,688): 1,376,256
    # 24 of 768 x 3,072 (589,824 B -> 1,048,576, +458,752): 11,010,048
    # wte 9,649,344 B -> 16,777,216, +7,127,872; wpe 196,608 -> 262,144, +65,536
    # 74 vectors of 768 (6 a layer and the final norm's 2; 192 B -> 256, +64): 4,736;
    # 12 of 3,072 (768 -> 1,024, +256): 3,072; 12 of 2,304 (576 -> 1,024, +448): 5,376
    pinned = {"training": {"offload": {"pin_memory": True}}}
    rounding = {}
    for h in (1, 8):
        r = resolve(scenario(merge(_raw(zero_hpz_partition_size=h), pinned)))
        t = host_timeline(r, build_inventory(r)).timeline
        rounding[h] = sum(e.nbytes for e in t.events if e.part.startswith("pinned rounding"))
    assert rounding[1] == 16_777_216 - PRIMARY == 1_222_240
    secondary = 983_040 + 1_376_256 + 11_010_048 + 7_127_872 + 65_536 + 4_736 + 3_072 + 5_376
    assert rounding[8] == 1_222_240 + secondary == 21_798_176
