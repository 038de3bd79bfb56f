"""Without pipelining, Megatron-Core's combined 1F1B runs the first micro-batch's forward and
the last micro-batch's backward alone, "no a2a overlapping" (NVIDIA/Megatron-LM
megatron/core/pipeline_parallel/combined_1f1b.py @ 00caa53af309,
`combined_1f1b_schedule_for_no_pipelining`): their all-to-alls block for their own time, the
computation unslowed by an SM share; the other passes keep the paired shape (issue 39,
tiersim/workload/experts.py `overlapped`, `alone_unit`)."""

from __future__ import annotations

import dataclasses

import pytest
from engine_helpers import merge, scenario
from invariant_checks import MODEL

from tiersim import api
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.resolved import resolve
from tiersim.workload.comms import Comm
from tiersim.workload.experts import alone_unit, overlapped
from tiersim.workload.work import build_workload

NVLINK = Network(NetChannel.NVLINK)
# docs/invariants.md, "Turning on `overlap_expert_comm` slows an `ordered` step": the minimal
# scenario of seed 43 case 42 (`explore_wide.py`), +1.10 % with the overlap before
MINIMAL = {
    "name": "overlap-first-forward",
    "model": {**MODEL, "experts": 4, "experts_per_token": 2, "shared_experts": 0},
    "training": {
        "seq_len": 512,
        "micro_batch_size": 1,
        "grad_accumulation": 4,
        "optimizer": "adam",
        "recompute": "full",
        "implementation": "megatron",
        "optimizer_step": "synchronous",
    },
    "parallel": {
        "data": 16,
        "zero_stage": 2,
        "expert": 4,
        "expert_imbalance": 1.5,
        "overlap_expert_comm": True,
    },
    "hardware": {"preset": "h200-hbf", "gpu": {"collective_sm_share": 0.15}},
    "simulation": {"link_sharing": "ordered"},
}
OFF = {"parallel": {"overlap_expert_comm": False}}


def _run(raw: dict, record: bool = False):
    return api.run(api.build(raw), record=record)


@pytest.fixture(scope="module")
def traced():
    run = _run(MINIMAL, record=True)
    events = run.result.trace["traceEvents"]
    threads = [e for e in events if e.get("name") == "thread_name"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in threads}
    on = [e for e in events if e["ph"] == "X" and names.get((e["pid"], e.get("tid"))) == "compute"]
    return run, sorted(on, key=lambda e: e["ts"])


def _after(ops: list, name: str) -> tuple[dict, dict]:
    """The compute stream's op `name` and the one after it."""
    at = next(i for i, e in enumerate(ops) if e["name"] == name)
    return ops[at], ops[at + 1]


def test_the_paired_and_alone_shapes_by_hand():
    # forward 2 ms, backward 4 ms; the forward's all-to-alls 3 ms alone, the backward's
    # 5 ms (latency only: no bytes), SM share 0.15. Paired: the forward slowed by
    # 0.15 x min(5, 2) = 0.3 ms, the backward by 0.15 x min(3, 4) = 0.45 ms; after the
    # forward a wait of 5 - 2 = 3 ms, after the backward none (3 < 4). Alone: 2 and 4 ms,
    # each pass's own all-to-alls blocking, nothing beside; a later layer's 1 ms added to
    # both passes (as FP8's amax reduction adds) is kept
    raw = merge(MINIMAL, {"training": {"grad_accumulation": 2}})
    r = resolve(scenario(raw))
    fwd = Comm("ep dispatch+combine", 0, 3e-3, NVLINK, "expert")
    bwd = Comm("ep backward", 0, 5e-3, NVLINK, "expert")
    comms, f, b = overlapped(r, {"ep_forward": fwd, "ep_backward": bwd}, 2e-3, 4e-3)
    assert (f, b) == pytest.approx((2.3e-3, 4.45e-3), rel=1e-12)
    assert comms["ep_forward"].latency_s == pytest.approx(3e-3, rel=1e-12)
    assert "ep_backward" not in comms
    unit = next(u for u in build_workload(r).units if u.ep_alone is not None)
    paired = dataclasses.replace(unit, forward_s=f + 1e-3, backward_s=b + 1e-3, **comms)
    alone = alone_unit(paired)
    assert (alone.forward_s, alone.backward_s) == pytest.approx((3e-3, 5e-3), rel=1e-12)
    assert (alone.ep_forward, alone.ep_backward) == (fwd, bwd)
    assert alone.ep_forward_hidden is None and alone.ep_backward_hidden is None


def test_the_first_forward_and_last_backward_block_for_their_own_all_to_alls(traced):
    _, ops = traced
    for layer in range(MODEL["layers"]):
        first, after_first = _after(ops, f"forward L{layer} mb0")
        paired, wait = _after(ops, f"forward L{layer} mb1")
        # alone: its own dispatch and combine, with bytes, blocking from the forward's end
        assert after_first["name"] == "ep dispatch+combine"
        assert after_first["args"]["bytes"] > 0
        assert after_first["ts"] == pytest.approx(first["ts"] + first["dur"], abs=1e-6)
        # paired: slowed by 0.15 x the forward (the backward's all-to-alls outlast it), then
        # the wait for the backward all-to-alls' excess over the unslowed forward
        assert paired["dur"] == pytest.approx(first["dur"] * 1.15, rel=1e-3)
        assert wait["name"] == "ep backward (outlasting the forward)"
        assert wait["args"]["bytes"] == 0
        last, after_last = _after(ops, f"backward L{layer} mb3")
        own = after_last["dur"]  # the last backward's all-to-alls alone, blocking
        assert after_last["name"] == "ep backward" and after_last["args"]["bytes"] > 0
        assert after_last["ts"] == pytest.approx(last["ts"] + last["dur"], abs=1e-6)
        assert wait["dur"] == pytest.approx(own - first["dur"], abs=0.02)


@pytest.mark.parametrize(
    "where",
    [
        {"hardware": {"network": {"inter_node_latency": "2 us"}}},
        {"parallel": {"overlap_gradient_reduce": False}},
    ],
)
def test_the_overlap_never_slows_the_minimal_ordered_step(where):
    # before alonepass: 2,436.45 against 2,409.97 us (+1.10 %) at the preset's network.
    # Since rsqueue the data-parallel reduce-scatters are bounded as the frameworks bound
    # them (engine/reduce_depth.py: the GPU waits for the one before at each issue): at the
    # preset's 5 us they set the step, and the overlap, moving GPU time from the backward
    # (where the GPU waits for them anyway) into the forward (where none is issued and the
    # network idles), is slower there: 2,526.86 against 2,447.42 us, the frameworks' real
    # cost. Where they do not set it the claim holds: 2 us, 1,428.07 against 1,569.73 us;
    # reduced on the GPU's stream, 3,411.82 against 3,659.64 us
    with_it = _run(merge(MINIMAL, where)).report["step"]["time_s"]
    without = _run(merge(merge(MINIMAL, OFF), where)).report["step"]["time_s"]
    assert with_it <= without * (1 + 1e-9)


def test_one_micro_batch_overlaps_nothing():
    one = merge(MINIMAL, {"training": {"grad_accumulation": 1}})
    step = _run(one).report["step"]["time_s"]
    assert step == pytest.approx(_run(merge(one, OFF)).report["step"]["time_s"], rel=1e-12)
