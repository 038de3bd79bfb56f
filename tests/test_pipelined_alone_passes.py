"""Pipelined, Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`) runs one
warm-up forward more on every stage and pairs forward k + warm-up with backward k in the
steady phase; the warm-up's forwards and the cool-down's backwards have no pass beside them
and run alone, their all-to-alls blocking, their computation unslowed (NVIDIA/Megatron-LM
megatron/core/pipeline_parallel/schedules.py @ 00611e6eeb0b, `get_pp_rank_microbatches`,
`forward_backward_helper_wrapper` called with only an f_ or only a b_virtual_microbatch_id;
issue 39, ppalone). Expected values by hand from Megatron's formulas."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario
from test_expert_alone_passes import MINIMAL, OFF
from test_plan_bound import bounds_and_run

from tiersim import api
from tiersim.workload.pipeline import Op, alone_visits, stage_schedule, warmup_forwards
from tiersim.workload.pipeline_alone import evaluate_alone

PIPELINED = merge(MINIMAL, {"name": "overlap-pipelined", "parallel": {"pipeline": 2, "data": 8}})


def test_combined_1f1b_warms_up_one_forward_more():
    # Megatron's interleaved warm-up (p - k - 1)·2 + (v - 1)·p, + 1 with the overlap: p = 4,
    # v = 2, m = 8: stage 0 6 + 4 + 1 = 11 of 16, stage 3 0 + 4 + 1 = 5; plain 1F1B p - k
    # (Megatron-Core asks for a virtual pipeline; tiersim takes it alike): 4 and 1
    assert [warmup_forwards(k, 4, 8, 2, True) for k in (0, 3)] == [11, 5]
    assert [warmup_forwards(k, 4, 8, 2) for k in (0, 3)] == [10, 4]
    assert [warmup_forwards(k, 4, 8, 1, True) for k in (0, 3)] == [4, 1]
    # stage 3 of p = 4, v = 1: forward 0 alone, then forward 1 beside backward 0 (never a
    # micro-batch's own backward, which waits on its forward), ..., backward 7 alone
    order = stage_schedule(3, 4, 8, 1, True)
    assert order[:3] == [Op(0, 0, "forward"), Op(1, 0, "forward"), Op(0, 0, "backward")]
    assert order[-2:] == [Op(6, 0, "backward"), Op(7, 0, "backward")]


def test_the_alone_visits_by_hand():
    # p = 4, v = 2, m = 8, stage 0: warm-up 11 forward visits, visit k on chunk (k % 8) // 4:
    # 0-3 chunk 0, 4-7 chunk 1, 8-10 chunk 0: 7 and 4. The last 11 backward visits (5-15),
    # chunk 1 - (k % 8) // 4: 5-7 chunk 0, 8-11 chunk 1, 12-15 chunk 0: 7 and 4 again
    assert alone_visits(((0, 1), (2, 3)), 0, 4, 8) == [(7, 7)] * 2 + [(4, 4)] * 2
    # stage 3: warm-up 5 (0-3 chunk 0, 4 chunk 1); without pipelining one of each a unit
    assert alone_visits(((0, 1), (2, 3)), 3, 4, 8) == [(4, 4)] * 2 + [(1, 1)] * 2
    assert alone_visits(((0, 1, 2),), 0, 1, 5) == [(1, 1)] * 3


def test_the_pipeline_timed_with_its_alone_passes_by_hand():
    # p = 2, m = 2, v = 1: forward 1, backward 2 paired; 1.5 and 2.5 alone. Stage 0 warms up
    # min(2, 2) = 2: F0 F1 B0 B1, all alone; stage 1 warms up 1: F0 alone, F1 and B0
    # paired, B1 alone. Stage 0: F0 0-1.5, F1 1.5-3. Stage 1: F0 1.5-3, F1 3-4, B0 4-6
    # (its own forward done), B1 6-8.5. Stage 0: B0 after stage 1's B0, 6-8.5, B1 after
    # stage 1's B1, 8.5-11. Busy: 1.5 + 1.5 + 2.5 + 2.5 = 8 and 1.5 + 1 + 2 + 2.5 = 7
    got = evaluate_alone(2, 2, 1, (1.0, 2.0, 1.5, 2.5))
    assert got.step_s == 11.0
    assert got.finish_s == (11.0, 8.5)
    assert got.busy_s == (8.0, 7.0)


@pytest.fixture(scope="module")
def traced():
    run = api.run(api.build(PIPELINED), record=True)
    events = run.result.trace["traceEvents"]
    threads = [e for e in events if e.get("name") == "thread_name"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in threads}
    on = [e for e in events if e["ph"] == "X" and names.get((e["pid"], e.get("tid"))) == "compute"]
    return run, sorted(on, key=lambda e: e["ts"])


def _after(ops: list, name: str) -> dict:
    """The compute stream's op after op `name`."""
    return ops[next(i for i, e in enumerate(ops) if e["name"] == name) + 1]


def test_the_warm_up_and_cool_down_passes_block_for_their_own_all_to_alls(traced):
    # 4 layers, 2 stages: 2 layers a stage; m = 4. Stage 0 warms up p - 0 = 2 forwards
    # (mb0, mb1: alone), pairs forward 2 with backward 0 and 3 with 1, cools down backwards
    # 2 and 3 (alone); stage 1 warms up 1: forward mb0 and backward mb3 alone. An alone
    # pass's all-to-alls move their bytes on the stream ("ep dispatch+combine", "ep
    # backward"); a paired one waits only for what outlasts it, no bytes
    run, ops = traced
    stage = run.report["inventory"]["pipeline_stage"]
    alone = 2 - stage
    layers = sorted({e["name"].split()[1] for e in ops if e["name"].startswith("forward L")})
    assert len(layers) == 2
    for layer in layers:
        for mb in range(4):
            after_f = _after(ops, f"forward {layer} mb{mb}")
            after_b = _after(ops, f"backward {layer} mb{mb}")
            f_alone, b_alone = mb < alone, mb >= 4 - alone
            assert (after_f["name"] == "ep dispatch+combine") == f_alone, (layer, mb)
            assert (after_f["args"].get("bytes", 0) > 0) == f_alone, (layer, mb)
            assert (after_b["name"] == "ep backward") == b_alone, (layer, mb)


def test_a_pipelined_step_of_all_warm_up_overlaps_nothing():
    # m = 1: every stage's warm-up holds its one forward (min(p - k, 1) = 1) and its
    # cool-down its one backward: no pass has a partner, so the overlap changes nothing,
    # the step's priced parts neither (workload/breakdown.py: the alone passes' all-to-alls
    # blocking, their computation unslowed, the fill and drain at their times)
    one = merge(PIPELINED, {"training": {"grad_accumulation": 1}})
    step = api.run(api.build(one)).report["step"]
    without = api.run(api.build(merge(one, OFF))).report["step"]
    assert step["time_s"] == pytest.approx(without["time_s"], rel=1e-12)
    assert step["breakdown"] == pytest.approx(without["breakdown"], rel=1e-9, abs=1e-15)


def test_interleaved_with_m_equal_p_pairs_a_pass_on_the_last_stage():
    # Megatron-Core has no all-warm-up case at m = p (schedules.py @ 00611e6eeb0b,
    # get_pp_rank_microbatches): p = 2, v = 2, m = 2, with the overlap the simulated stage 1
    # warms up min((2 - 1 - 1)·2 + (2 - 1)·2 + 1, 2·2) = 3 forwards (L2 mb0, L2 mb1, L3 mb0),
    # then forward L3 mb1 beside backward L3 mb0, then 3 backwards alone: 3 all-to-alls
    # alone each way, one forward's beside a backward's
    assert warmup_forwards(1, 2, 2, 2, True) == 3
    assert warmup_forwards(0, 2, 2, 2, True) == 4  # min(2 + 2 + 1, 4): stage 0 all warm-up
    raw = merge(
        PIPELINED, {"parallel": {"virtual_pipeline": 2}, "training": {"grad_accumulation": 2}}
    )
    events = api.run(api.build(raw), record=True).result.trace["traceEvents"]
    names = [e["name"] for e in events if e.get("ph") == "X"]
    stage = names[: names.index("optimizer rest")]  # the simulated stage's passes
    assert stage.count("ep dispatch+combine") == 3
    assert stage.count("ep backward") == 3
    assert stage.count("ep backward (outlasting the forward)") == 1
    assert stage.index("forward L3 mb1") + 1 == stage.index("ep backward (outlasting the forward)")


VARIANTS = [
    {},
    {"training": {"grad_accumulation": 1}},
    {"parallel": {"virtual_pipeline": 2}, "training": {"grad_accumulation": 4}},
    {"simulation": {"link_sharing": "fair"}},
]


@pytest.mark.parametrize("extra", VARIANTS)
def test_the_bounds_hold_the_pipelined_step_between_them(extra):
    # the bound takes each alone pass's SM-share slowdown off the compute (plan/bound.py);
    # the upper bound on the period counts every all-to-all whole and every wait
    lower, step, upper, period = bounds_and_run(scenario(merge(PIPELINED, extra)))
    assert 0 < lower <= step
    assert period <= upper


@pytest.mark.parametrize("extra", VARIANTS)
def test_more_bandwidth_never_slows_the_pipelined_step(extra):
    # docs/invariants.md: the alone passes' all-to-alls only shorten with a faster link
    raw = merge(PIPELINED, extra)
    step = api.run(api.build(raw)).report["step"]["time_s"]
    for key in ("intra_node_bandwidth", "inter_node_bandwidth"):
        faster = api.build(raw)
        net = faster.scenario.hardware.network
        bw = getattr(net, key)
        twice = merge(raw, {"hardware": {"network": {key: f"{2 * bw:.0f} B/s"}}})
        assert api.run(api.build(twice)).report["step"]["time_s"] <= step * (1 + 1e-9)


def test_one_micro_batch_prices_as_without_the_overlap_unpipelined_too():
    # without pipelining the step breakdown priced every pass paired before (alonepass left
    # it): one micro-batch's forward and backward both run alone, so its priced parts are
    # those without the overlap
    one = merge(MINIMAL, {"training": {"grad_accumulation": 1}})
    step = api.run(api.build(one)).report["step"]["breakdown"]
    without = api.run(api.build(merge(one, OFF))).report["step"]["breakdown"]
    assert step == pytest.approx(without, rel=1e-9, abs=1e-15)
