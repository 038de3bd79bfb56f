"""Steps that alternate are measured over two (docs/invariants.md, (h);
tiersim/engine/alternating.py): the step reported is the mean of the two, worked out here
from each step's end in a run recorded op by op, and its parts fill it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from invariant_checks import merge
from wide_checks import parts_add_up

from tiersim import api, runner
from tiersim.config.load import build
from tiersim.engine import settling, simulate
from tiersim.engine.runs import Runs
from tiersim.report import text
from tiersim.report.sim_text import simulated_line
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "alternating-steps.yaml"
ZERO_INFINITY = FIXTURE.with_name("alternating-steps-zero-infinity.yaml")
PORT = FIXTURE.with_name("alternating-steps-port.yaml")
SETTLING = FIXTURE.with_name("settling-steps.yaml")
CYCLE = FIXTURE.with_name("alternating-steps-cycle.yaml")


class _Ends:
    """A recorder keeping each step's end: its last op's."""

    ops_wanted = True

    def __init__(self) -> None:
        self.ends: dict[int, float] = {}

    def op(self, op, start: float, end: float) -> None:
        self.ends[op.step] = max(self.ends.get(op.step, 0.0), end)

    def memory(self, tier: str, now: float, occupied: float) -> None:
        pass


def _raw(path: Path = FIXTURE) -> dict:
    return yaml.safe_load(path.read_text())


def _scenario(raw: dict):
    return build(raw, FIXTURE.parent, FIXTURE.name).scenario


def _step_ends(raw: dict, steps: int) -> list[float]:
    """Each step's end in a run of `steps` steps (its warm-up two fewer), recorded op by op."""
    told = _Ends()
    over = {"simulation": {"warmup_steps": steps - 2}}
    simulate.simulate(_scenario(merge(raw, over)), recorder=told)
    return [told.ends[k] for k in range(steps)]


def test_steps_that_alternate_are_measured_over_two():
    raw = _raw()
    report = api.run(api.build(raw)).report
    # Steps 0 to 3 as the engine runs them (one warm-up step more: the run it records is
    # four steps long, the run the step after one warm-up step is measured over two in)
    e = _step_ends(raw, 4)
    first, second = e[1] - e[0], e[2] - e[1]  # 8.3767 and 8.4910 ms
    assert abs(first - second) > 0.005 * first  # they alternate
    # the step after one warm-up step, over it and the next: (e2 - e0) / 2, 8.4338 ms;
    # measured over one, it was the first alone (0.68 % under)
    expected = (e[2] - e[0]) / 2
    assert report["step"]["time_s"] == pytest.approx(expected, rel=1e-12)
    assert report["step"]["time_s"] > first * 1.002
    assert report["sim"]["measured_steps"] == 2 and report["sim"]["steps_simulated"] == 4
    assert "steps 1 and 2 alternate" in report["sim"]["measured_steps_why"]
    assert simulated_line(report, None) == (
        "Simulated 4 steps (1 warm-up step, step 1 measured, step 2 compared with it, steps 1 "
        "and 2 reported: their lengths alternate, their mean, the run's last step trailing): "
        "810 events."
    )
    assert parts_add_up(report) == []  # (h): not so over step 1 alone
    # the trace draws step 1 (the run of three steps) and says what the report gives
    other = runner.simulate(_scenario(raw), record=True).trace["otherData"]
    assert other["measured_end_s"] - other["measured_start_s"] == pytest.approx(first)
    assert other["reported_step_s"] == report["step"]["time_s"]


def test_steps_that_have_not_settled_are_measured_until_they_do():
    # ZeRO-Infinity, the CPU updating a step late: since hpzsplit (DeepSpeed ZeRO-3 gathers
    # its persistent parameters once a step) the steps settle in a decaying oscillation,
    # each step's parts filling it (no sign of those): measured over one, the report gave
    # step 1, 1.7 % under the settled step. The run as configured holds the step after the
    # measured one (1 warm-up, 1 measured, 1 compared, 1 trailing); the two differ, so the
    # runs one step longer each (5 to 9 steps) measure steps 2 to 7: steps 6 and 7 as long,
    # step 7 reported
    raw = _raw(ZERO_INFINITY)
    e = _step_ends(raw, 10)
    s = [e[k + 1] - e[k] for k in range(9)]  # s[k]: step k + 1
    one, two = s[0], s[1]  # 5.292775 and 5.442162 ms, 2.8 % apart
    assert abs(one - two) > 0.025 * one  # the step after the measured one differs
    # steps 1 to 5 each differ from the next (steps 2 to 6: 5.442162, 5.380366, 5.393710,
    # 5.377029, 5.382727 ms; the least apart, steps 5 and 6, 0.106 %)
    assert all(abs(s[k] - s[k + 1]) > 1e-3 * s[k] for k in range(5))
    assert s[6] == pytest.approx(s[5], rel=1e-12) and s[7] == pytest.approx(s[5], rel=1e-12)
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx(s[6], rel=1e-12)  # step 7, 5.382727 ms
    assert report["step"]["time_s"] > one * 1.015  # 1.70 % over step 1
    assert report["sim"]["steps_simulated"] == 9 and report["sim"]["measured_steps"] == 1
    why = report["sim"]["measured_steps_why"]
    assert why.startswith("step 1 (5.29277 ms) and the step after it (5.44216 ms) differ")
    assert "step 7 is the first after it whose parts fill it, as the step before's do" in why
    assert parts_add_up(report) == []


def test_a_two_step_cycle_is_reported_at_its_period():
    # FSDP ZeRO-3 over two pipeline stages, Adam's state on NVMe under the pipelined update
    # (the fixture's header: seed 32's draw 10 of explore_wide.py reduced): steps of
    # 3.942367 and 4.435440 ms for good from step 1, each step's parts filling it. The run
    # as configured (4 steps) finds steps 1 and 2 differ; the runs one step longer find
    # steps 1 to 4 two by two alike (the run of 6), and steps 3 and 4 are reported over
    # both, (e4 - e2) / 2, their period; measured over one, it was the shorter (5.9 % under)
    raw = _raw(CYCLE)
    e = _step_ends(raw, 6)
    one, two, three, four = (e[k + 1] - e[k] for k in range(4))  # steps 1 to 4
    assert abs(one - two) > 0.1 * one  # they alternate, 12.5 % apart
    assert (three, four) == pytest.approx((one, two), rel=1e-12)  # and repeat two by two
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx((e[4] - e[2]) / 2, rel=1e-12)
    assert report["step"]["time_s"] > one * 1.05  # 4.188904 ms, 6.3 % over step 1
    assert report["sim"]["measured_steps"] == 2 and report["sim"]["steps_simulated"] == 6
    why = report["sim"]["measured_steps_why"]
    assert why.startswith("step 1 (3.94237 ms) and the step after it (4.43544 ms) differ")
    assert why.endswith("as steps 1 and 2 do: a cycle of two steps, at its period")
    assert parts_add_up(report) == []


def test_a_port_overdrawn_finds_steps_that_alternate_with_parts_filling_them():
    # FSDP ZeRO-3, the pipelined update writing the fp32 master back to HBF: 4 layers of
    # 4 x 256^2 + 3 x 256 x 1,024 + 2 x 256 = 1,049,088 parameters, the embeddings and the
    # head 1,024 x 256 each, the final norm 256: 4,720,896 x 4 B = 18,883,584 B a step,
    # 377.67 us at HBF's 50 GB/s write port. Steps 196.28 and 565.06 us, over and over:
    # the shorter one, measured over one step, its parts filling it, had the port at 1.92
    # of it and the report was refused (exit 70; seed 41 case 20 of explore_wide.py)
    raw = _raw(PORT)
    e = _step_ends(raw, 6)
    one, two, three, four = (e[k + 1] - e[k] for k in range(4))  # steps 1 to 4
    assert abs(one - two) > 0.5 * one  # they alternate
    assert (three, four) == pytest.approx((one, two), rel=1e-12)  # and repeat two by two
    full_rate_s = 18_883_584 / 50e9
    assert one < full_rate_s < (one + two) / 2
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx((e[2] - e[0]) / 2, rel=1e-12)
    port = report["tiers"]["hbf"]["ports"]["write"]
    assert port["bytes_per_step"] == 18_883_584
    assert port["full_rate_s"] == pytest.approx(full_rate_s, rel=1e-12)
    assert port["bandwidth_utilization"] <= 1
    assert parts_add_up(report) == []


def _setup(raw: dict):
    res = resolve(_scenario(raw))
    return res, simulate.prepare(res, build_inventory(res))


def test_a_sample_whose_steps_alternate_is_not_extrapolated():
    # A run of 4 micro-batches is no sample to grow by its periods: its steps alternate (the
    # test above), so its growth would be one of two steps'. One run's two last periods
    # (tiersim.engine.periods); three runs (an async checkpoint's drain measured on each),
    # the shortest the one that alternates
    res, setup = _setup(_raw())
    one = simulate._from_one_run(res, setup, 4, None)
    ck = {"checkpoint": {"every_steps": 10, "target": "nvme", "mode": "async"}}
    res, setup = _setup(merge(_raw(), ck))
    three = simulate._extrapolated(res, setup, (4, 6, 8), None)
    for refused in (one, three):
        assert refused.steps_alternate and "steps 1 and 2 alternate" in refused.why


def test_the_longer_run_keeps_within_max_layer_passes():
    # 4 layers over 2 stages and the head: 3 units, 4 micro-batches: the run of 3 steps
    # simulates 36 layer passes, the one step longer 48; at a limit of 47 the step stays
    # measured over one, its parts not filling it, and the report says that its steps were
    # not seen to settle (before, silently); at 48 over two
    def report(limit: int) -> dict:
        over = {"simulation": {"max_layer_passes": limit}}
        return api.run(api.build(merge(_raw(), over))).report

    one, two = report(47), report(48)
    assert one["sim"]["steps_simulated"] == 3 and one["sim"]["settled"] is False
    assert one["sim"]["warnings"][0]["code"] == "W-STEP-UNSETTLED"
    why = one["sim"]["measured_steps_why"]
    assert "up to step 1, no longer run within simulation.max_layer_passes" in why
    assert "no step after it compared (simulation.max_layer_passes)" in simulated_line(one, None)
    assert two["sim"]["measured_steps"] == 2 and "settled" not in two["sim"]
    assert one["step"]["time_s"] < two["step"]["time_s"]


def test_a_step_is_measured_once_its_steps_settle():
    # seed 43 case 64 of explore_wide.py: steps 1 to 3 alike, their parts short of them
    # (279.666 of 283.839 us); the step after one warm-up step was step 1, (h) broken. The
    # steps of a run of 8 recorded op by op: step 4 is shorter (282.549 us, its parts
    # filling it), but the steps are still settling; steps 5 and 6 last 281.753 us each
    # (the master's 1,048,576 + 3 x 4,196,352 B written back to HBF a step at its 50 GB/s
    # write port, 272.753 us, and the latency of the three write-backs chained one after
    # another, 3 us each: HBM's 1 us access and the HBF link's 2 us, h200-hbf.yaml; the
    # first write-back's runs beside the previous step's last). The report gives step 6,
    # found by runs of 4 to 8 steps, as the same simulation with 6 warm-up steps measures
    # it (no sign there)
    raw = _raw(SETTLING)
    e = _step_ends(raw, 8)
    one, two, three, four, five, six = (e[k + 1] - e[k] for k in range(6))  # steps 1 to 6
    assert two == pytest.approx(one, rel=1e-12) and three == pytest.approx(one, rel=1e-12)
    assert four < three * (1 - 1e-3)  # 282.549 us, 0.45 % under
    assert five < four * (1 - 1e-3)  # 281.753 us, 0.28 % under step 4
    assert six == pytest.approx(five, rel=1e-12)
    assert five == pytest.approx((1_048_576 + 3 * 4_196_352) / 50e9 + 3 * 3e-6, rel=1e-12)
    settled = api.run(api.build(merge(raw, {"simulation": {"warmup_steps": 6}}))).report
    assert "measured_steps" not in settled["sim"] and parts_add_up(settled) == []
    assert settled["step"]["time_s"] == pytest.approx(six, rel=1e-12)
    report = api.run(api.build(raw)).report
    assert report["step"] == settled["step"]  # every figure of the step, step 6's
    assert report["checkpoint"] == settled["checkpoint"]  # measured after step 6 too
    assert parts_add_up(report) == []
    # the run with 6 warm-up steps (8 steps) and, the checkpoint's run holding no step after
    # the measured one, a plain run a step longer comparing steps 6 and 7: 9
    assert report["sim"]["measured_steps"] == 1 and report["sim"]["steps_simulated"] == 9
    why = report["sim"]["measured_steps_why"]
    assert "step 6 is the first after it whose parts fill it, as the step before's do" in why
    line = simulated_line(report, None)
    assert "then 4 runs one step longer each to 8, step 6 reported" in line
    assert "then with 6 warm-up steps, its checkpoint after step 6" in line
    # the trace draws step 1 (the run as configured) and says what the report gives
    other = runner.simulate(_scenario(raw), record=True).trace["otherData"]
    assert other["measured_step"] == 1 and other["reported_step_s"] == report["step"]["time_s"]


def test_at_the_bound_a_last_step_whose_parts_fill_it_is_reported(monkeypatch):
    # at 3 runs (runs of 5 to 7 steps after the run as configured's 4, steps 1 to 5
    # measured: without its checkpoint the run holds the step after) the fixture's steps have not
    # shown two alike with their parts filling both: step 5, the last measured, is
    # reported (281.753 us, its parts filling it), not step 4 (282.549 us), nor the first
    # two that alternate (steps 3 and 4, 283.194 us, whose parts do not fill them)
    raw = {k: v for k, v in _raw(SETTLING).items() if k != "checkpoint"}
    e = _step_ends(raw, 7)
    monkeypatch.setattr(settling, "settle_runs", lambda res, setup: 3)
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx(e[5] - e[4], rel=1e-12)
    assert report["sim"]["steps_simulated"] == 7 and parts_add_up(report) == []
    why = report["sim"]["measured_steps_why"]
    assert "step 5 (0.281753 ms) is reported, its parts filling it" in why


def test_the_runs_measuring_a_step_until_its_steps_settle_are_bounded(monkeypatch):
    # at most settling.settle_runs runs a step longer each: at 1, the run as configured
    # (4 steps: without its checkpoint it holds the step after the measured one) and the run
    # of 5 measure steps 1 to 3, alike and short of their parts: step 3
    # reported (the last measured), the report saying the bound was reached
    raw = {k: v for k, v in _raw(SETTLING).items() if k != "checkpoint"}
    e = _step_ends(raw, 5)
    monkeypatch.setattr(settling, "settle_runs", lambda res, setup: 1)
    asked: list[int] = []
    plain = Runs.__call__

    def spied(self, res, setup, steps, *args, **kwargs):
        asked.append(steps)
        return plain(self, res, setup, steps, *args, **kwargs)

    monkeypatch.setattr(Runs, "__call__", spied)
    report = api.run(api.build(raw)).report
    assert asked == [4, 5]  # the run as configured (one warm-up step), then one longer
    assert report["sim"]["steps_simulated"] == 5
    assert report["step"]["time_s"] == pytest.approx(e[3] - e[2], rel=1e-12)
    assert (
        "the last of 1 run one step longer each (the bound)" in report["sim"]["measured_steps_why"]
    )
    assert parts_add_up(report) != []  # not settled within the bound: (h) still broken
    # and said so: the report's flag and code, the sim line, the text's warnings
    assert report["sim"]["settled"] is False
    assert [w["code"] for w in report["sim"]["warnings"]] == ["W-STEP-UNSETTLED"]
    line = simulated_line(report, None)
    assert "The step reported is not known to be the steady state's" in line
    assert line.endswith("[W-STEP-UNSETTLED].")
    assert "step not settled: the steps after the measured one" in text.step_tables(report)


def test_at_the_bound_the_first_two_steps_that_alternate_are_reported():
    # Without `recompute_modules` the fixture's steps alternate, decaying, and each step's
    # parts are the next step's length: no step's parts, nor two's, fill them within the
    # bound. The bound (engine.settling): 5 runs and two for each queue a step hands the
    # next: the pipelined update's step of lag, 2 pipeline stages, the prefetch depth the
    # run kept (sim.prefetch_depth, 1) and no swap buffers (FSDP, not DeepSpeed):
    # 5 + 2 x (1 + 2 + 1 + 0) = 13 runs after the run as configured (4 steps), to 17 steps,
    # step 15 the last measured. The first two that alternate are reported, their mean as
    # before: steps 1 and 2 over both, (e2 - e0) / 2, 8.4903 ms, from the step ends of a run
    # recorded op by op, and the report says the steps had not settled
    raw = _raw()
    del raw["training"]["recompute_modules"]
    e = _step_ends(raw, 4)
    report = api.run(api.build(raw)).report
    assert report["sim"]["prefetch_depth"] == 1
    assert report["step"]["time_s"] == pytest.approx((e[2] - e[0]) / 2, rel=1e-12)
    why = report["sim"]["measured_steps_why"]
    assert report["sim"]["measured_steps"] == 2 and why.startswith("steps 1 and 2 alternate")
    assert "up to step 15, the last of 13 runs one step longer each (the bound)" in why
    assert report["sim"]["steps_simulated"] == 17 and report["sim"]["settled"] is False
    assert report["sim"]["warnings"][0]["code"] == "W-STEP-UNSETTLED"


def test_an_alternation_that_settles_into_a_cycle_after_step_7_is_reported_at_its_period():
    # ZeRO-Infinity at `sub_group_size: 150000` (the fixture's header): an alternation that
    # decays until step 9, then steps of 5.262385 and 5.524012 ms for good. At the old bound
    # (5 runs, to step 7) step 7 was reported, 5.263312 ms, 2.4 % under the period, the words
    # saying only that the bound was reached. The bound now (engine.settling): 5 runs and two
    # for each queue a step hands the next: the delayed update's step of lag, 1 pipeline
    # stage, no unit fetched ahead (sim.prefetch_depth 0: DeepSpeed's window) and DeepSpeed's
    # 2 swap buffers (training.offload.buffer_count): 5 + 2 x (1 + 1 + 0 + 2) = 13 runs. The
    # steady state worked out here from one run of 16 recorded op by op: from step 9 each
    # step as long as the one two before it, and step 7 not as step 9
    raw = merge(_raw(ZERO_INFINITY), {"training": {"offload": {"sub_group_size": 150000}}})
    e = _step_ends(raw, 16)
    s = [e[k + 1] - e[k] for k in range(15)]  # s[k]: step k + 1
    assert all(s[k] == pytest.approx(s[k + 2], rel=1e-12) for k in range(8, 13))
    assert abs(s[6] - s[8]) > 1e-4 * s[8]  # step 7 against step 9: not yet settled
    assert abs(s[8] - s[9]) > 0.04 * s[8]  # steps 9 and 10 alternate, 5.0 % apart
    period = (s[8] + s[9]) / 2  # 5.393198 ms
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx(period, rel=1e-12)
    assert report["step"]["time_s"] > s[6] * 1.02  # step 7, reported before: 2.4 % under
    assert report["sim"]["measured_steps"] == 2 and "settled" not in report["sim"]
    assert report["sim"]["prefetch_depth"] == 0
    why = report["sim"]["measured_steps_why"]
    assert why.endswith("as steps 9 and 10 do: a cycle of two steps, at its period")
    assert report["sim"]["steps_simulated"] == 14  # 10 of the 13 runs: steps 11 and 12 mean
    assert parts_add_up(report) == []
    assert simulated_line(report, None).startswith(
        "Simulated 14 steps (1 warm-up step, step 1 measured, step 2 compared with it, then "
        "10 runs one step longer each to 14, steps 11 and 12 reported: their lengths "
        "alternate, their mean, each run's last step trailing)"
    )


def test_a_step_whose_next_step_cannot_be_run_is_said_unchecked():
    # The ZeRO-Infinity fixture: 4 layers in one stage, a unit a layer and the head, 4
    # micro-batches: the run as configured (3 steps) is 3 x 4 x 5 = 60 layer passes, with
    # the step after the measured one compared 80. Step 1's parts fill it (no other sign):
    # at a limit of 79 no step after it is compared, and the report, which gave step 1
    # silently, says that its steps were not seen to settle; at 80 step 2 is compared, the
    # two differ, and no longer run fits: step 2 reported, said not settled either
    def report(limit: int) -> dict:
        over = {"simulation": {"max_layer_passes": limit}}
        return api.run(api.build(merge(_raw(ZERO_INFINITY), over))).report

    e = _step_ends(_raw(ZERO_INFINITY), 4)  # step 2 with step 3 beside it
    short, room = report(79), report(80)
    assert short["step"]["time_s"] == pytest.approx(e[1] - e[0], rel=1e-12)  # step 1
    assert short["sim"]["steps_simulated"] == 3 and short["sim"]["settled"] is False
    assert short["sim"]["warnings"][0]["code"] == "W-STEP-UNSETTLED"
    assert short["sim"]["measured_steps_why"].startswith(
        "step 1 is reported without the step after it compared"
    )
    assert simulated_line(short, None).startswith(
        "Simulated 3 steps (1 warm-up step, step 1 measured, no step after it compared "
        "(simulation.max_layer_passes), the run's last step trailing): "
    )
    assert room["sim"]["steps_simulated"] == 4 and room["sim"]["settled"] is False
    assert room["step"]["time_s"] == pytest.approx(e[2] - e[1], rel=1e-12)  # step 2
    assert "no longer run within simulation.max_layer_passes" in room["sim"]["measured_steps_why"]


def test_the_bound_counts_each_queue_a_step_hands_the_next():
    # engine.settling: 5 runs, and 2 for each of the update's step of lag, each pipeline
    # stage, each unit fetched ahead (as the run cut it) and each DeepSpeed swap buffer
    cases = [
        # ZeRO-Infinity: delayed, 1 stage, depth 0 (DeepSpeed's window), 2 buffers
        ({}, 5 + 2 * (1 + 1 + 0 + 2)),
        ({"training": {"offload": {"buffer_count": 4}}}, 5 + 2 * (1 + 1 + 0 + 4)),
        ({"training": {"optimizer_step": "synchronous"}}, 5 + 2 * (0 + 1 + 0 + 2)),
    ]
    for over, runs in cases:
        res, setup = _setup(merge(_raw(ZERO_INFINITY), over))
        assert setup.depth == 0
        assert settling.settle_runs(res, setup) == runs
    # FSDP over 2 stages, the pipelined update, depth 1 as the run cut it, no swap buffers
    res, setup = _setup(_raw())
    assert setup.depth == 1 and settling.settle_runs(res, setup) == 5 + 2 * (1 + 2 + 1 + 0)


def test_a_checkpointed_run_reports_the_settled_step(monkeypatch):
    # The ZeRO-Infinity fixture with an async checkpoint to NVMe every 2 steps: the
    # checkpointed run as configured holds no step after the measured one (its runs are
    # measured against the plain run's end), and the step reported was step 1 (5.292775 ms),
    # 1.7 % under the settled step. Now a plain run one step longer holds step 2, the two
    # differ and the steps are measured on as without the checkpoint: step 7 reported
    # (5.382727 ms, from a run of 10 recorded op by op: steps 6 to 8 as long), and the
    # checkpoint measured after it, as the same run with 7 warm-up steps measures it (there
    # steps 7 and 8 alike: nothing more)
    ck = {"checkpoint": {"every_steps": 2, "target": "nvme", "mode": "async"}}
    raw = merge(_raw(ZERO_INFINITY), ck)
    e = _step_ends(_raw(ZERO_INFINITY), 10)
    s = [e[k + 1] - e[k] for k in range(9)]
    assert s[5] == pytest.approx(s[6], rel=1e-12) and s[7] == pytest.approx(s[6], rel=1e-12)
    assert abs(s[0] - s[1]) > 0.025 * s[0]
    report = api.run(api.build(raw)).report
    assert report["step"]["time_s"] == pytest.approx(s[6], rel=1e-12)
    assert report["step"]["time_s"] > s[0] * 1.015
    settled = api.run(api.build(merge(raw, {"simulation": {"warmup_steps": 7}}))).report
    assert "measured_steps" not in settled["sim"]
    assert report["step"] == settled["step"] and report["checkpoint"] == settled["checkpoint"]
    why = report["sim"]["measured_steps_why"]
    assert "step 7 is the first after it whose parts fill it" in why
    assert "settled" not in report["sim"] and parts_add_up(report) == []
    what = report["sim"]["steps_simulated_what"]
    assert "step 2 compared with it (from a plain run a step longer than the checkpoint's)" in what
    assert what.endswith("then with 7 warm-up steps, its checkpoint after step 7")
