"""A checkpoint's interval lasts at least as long as each link is busy in it: the one
checkpoint simulated can fill idle link time in steps past its interval, which the next
checkpoint needs, so its added busy time over the interval's steps and stall once came to
more than the interval lasted (docs/invariants.md: seed 13 case 234 of
benchmarks/explore_invariants.py, exit 70 with links.hbf.utilization 1.0025)."""

import pytest
from invariant_checks import MODEL

from tiersim import api
from tiersim.analysis.checkpoint_interval import link_bound_stall_s
from tiersim.core.frozen import replaced
from tiersim.engine.results import LinkStats

# seed 13 case 234, as benchmarks/explore_invariants.py's `draw` gives it: an async
# checkpoint every 2 steps to HBF, where the optimizer state is homed and read each update
REPRODUCER = {
    "name": "explore",
    "model": MODEL,
    "training": {
        "seq_len": 512,
        "micro_batch_size": 1,
        "grad_accumulation": 4,
        "optimizer": "adamw",
        "recompute": "selective_op",
        "implementation": "torchtitan",
        "optimizer_step": "pipelined",
    },
    "parallel": {
        "data": 2,
        "tensor": 1,
        "pipeline": 1,
        "context": 1,
        "zero_stage": 0,
        "context_comm": "ring",
    },
    "placement": {"master": "dram", "optimizer": "hbf"},
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 2, "target": "hbf", "mode": "async"},
    "failures": {"mtbf": "3 h"},
}


@pytest.fixture(scope="module")
def reproduced():
    return api.run(api.build(REPRODUCER))  # raised ReportInvariantError (exit 70) before


def test_the_reproducer_reports_its_hbf_link_busy_the_whole_interval(reproduced):
    report, result = reproduced.report, reproduced.result
    ck, hbf = report["checkpoint"], report["links"]["hbf"]
    assert ck["interval_steps"] == 2
    # the HBF link's time over the interval (2 steps' busy_s, which carries the checkpoint's
    # share) is what bounds it: the interval lasts 2 steps and the stall, exactly as long
    span = 2 * report["step"]["time_s"] + ck["stall_s"]
    assert 2 * hbf["busy_s"] == pytest.approx(span, rel=1e-12)
    assert hbf["utilization"] == pytest.approx(1.0, rel=1e-12)
    assert result.period_s == pytest.approx(span / 2, rel=1e-12)
    assert all(link["utilization"] <= 1 + 1e-9 for link in report["links"].values())


def _with(result, busy_s: float, in_flight_s: float, step_s: float = 1.0):
    """The reproducer's step with one link, HBF, at the given seconds in a step of `step_s`."""
    hbf = LinkStats(0, busy_s, busy_s / step_s, {}, in_flight_s, in_flight_s / step_s)
    return replaced(result, time_s=step_s, links={"hbf": hbf})


def test_the_least_stall_by_hand(reproduced):
    result, run = reproduced.result, reproduced.result.checkpoint
    # step 1 s, link busy 0.9 s of it; the checkpoint adds 0.3 s busy: over an interval of 2
    # steps the link is busy 2 x 0.9 + 0.3 = 2.1 s, so the interval lasts at least 2.1 s:
    # a stall of 2.1 - 2 x 1 = 0.1 s (in flight: 2 x 0.95 + 0.1 = 2.0 s, no bound)
    step = _with(result, busy_s=0.9, in_flight_s=0.95)
    ck = replaced(run, link_busy_s={"hbf": 0.3}, link_in_flight_s={"hbf": 0.1})
    assert link_bound_stall_s(step, ck, 2) == pytest.approx(0.1, abs=1e-12)
    # every 4 steps: 4 x 0.9 + 0.3 = 3.9 s within 4 s: no bound (the idle 0.4 s takes it)
    assert link_bound_stall_s(step, ck, 4) == pytest.approx(0.0, abs=1e-12)
    # in flight binding: busy 0.5 s + 0.1 s; in flight 0.99 s a step + 0.1 s: 2 x 0.99 +
    # 0.1 = 2.08 s in 2 steps of 1 s: 0.08 s
    step = _with(result, busy_s=0.5, in_flight_s=0.99)
    assert link_bound_stall_s(step, ck, 2) == pytest.approx(0.08, abs=1e-12)
