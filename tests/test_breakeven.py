"""Break-even figures and the verdict across the unpublished figures' ranges.

Closed forms by hand arithmetic on hand-built step results (test_wear's base case); the
bisections checked by re-simulating at both ends of the bracket they return, and against the
bound the arithmetic gives.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import SCENARIOS, scenario
from test_wear import HBF_OPT, raw, result

from tiersim.analysis.breakeven import (
    REL_TOL,
    bisect_log,
    closed_form,
    margin_at,
    with_write_bandwidth,
    write_bandwidth_for_budget,
    write_bandwidth_to_match_host,
)
from tiersim.analysis.ranges import ENDURANCE, WRITE_BANDWIDTH, cases
from tiersim.analysis.wear import assess
from tiersim.runner import simulate

DAY = 86_400.0


# --- closed forms ------------------------------------------------------------------------------
# test_wear's base case: 105.84 GB a step, 900 steps a day = 95.256 TB a day on 4 TB, 3,000 P/E,
# budget 5 years = 1,825 days. Least P/E cycles = bytes a day x days / span:
#   95.256e12 x 1,825 / 4e12 = 95.256 x 456.25 = 43,460.55;
# least capacity = 4 TB / margin 0.0690281 = 57.947 TB;
# least wear span = 95.256e12 x 1,825 / 3,000 = 57.947 TB > 4 TB: none within the device.


def test_closed_form_break_even_by_hand():
    s = scenario(raw())
    a = assess(s, result(HBF_OPT))["hbf"]
    cf = closed_form(s, "hbf", a)
    assert cf.pe_cycles == pytest.approx(43_460.55, rel=1e-6)
    assert cf.capacity_bytes == pytest.approx(57.947e12, rel=1e-4)
    assert cf.wear_span_bytes is None
    # 43,460.55 cycles are 14.4869x the 1-year rating: on the default curve
    # (P/E = 3,000 x (1 year / t)^0.79742) t = 365 days x 14.4869^(-1 / 0.79742)
    #   = 365 x exp(-2.67325 x 1.254044) = 365 x 0.035010 = 12.778 days
    assert cf.retention_s == pytest.approx(12.778 * 86_400, rel=1e-3)


def test_closed_form_wear_span_within_the_device():
    # 10 steps a day: 10 x 105.84 GB = 1.0584 TB a day
    #   least wear span = 1.0584e12 x 1,825 / 3,000 = 643.86 GB
    #   least P/E       = 1.0584e12 x 1,825 / 4e12  = 482.895
    s = scenario(raw(budget={"steps_per_day": 10, "hbf": {"lifetime": "5 years"}}))
    a = assess(s, result(HBF_OPT))["hbf"]
    cf = closed_form(s, "hbf", a)
    assert cf.wear_span_bytes == pytest.approx(643.86e9, rel=1e-5)
    assert cf.pe_cycles == pytest.approx(482.895, rel=1e-5)
    # the least capacity is the least span here: the device is levelled whole
    assert cf.capacity_bytes == pytest.approx(643.86e9, rel=1e-5)


def test_a_dwpd_budget_does_not_depend_on_endurance():
    # 1 DWPD on 4 TB allows 4 TB a day; 95.256 TB written: least capacity 95.256 TB
    s = scenario(raw(budget={"hbf": {"drive_writes_per_day": 1}}))
    cf = closed_form(s, "hbf", assess(s, result(HBF_OPT))["hbf"])
    assert cf.pe_cycles is None and cf.wear_span_bytes is None
    assert cf.capacity_bytes == pytest.approx(95.256e12)


# --- bisection ---------------------------------------------------------------------------------


def test_bisect_log_finds_a_known_threshold():
    b = bisect_log(lambda x: x <= 37e9, 1e6, 1e12)
    assert b.value <= 37e9 < b.other
    assert b.other / b.value <= 1 + REL_TOL
    assert bisect_log(lambda x: True, 1.0, 2.0).holds_everywhere is True
    assert bisect_log(lambda x: False, 1.0, 2.0).value is None


def test_write_bandwidth_for_budget_checked_by_resimulation():
    # 1B parameters, fp32 master + moments on HBF: 12 GB written a step. The budget allows
    # 3,000 x 4e12 / 1,825 = 6.5753e12 B a day = 547.95 steps, so a step of at least
    # 86,400 / 547.95 = 157.68 s: the write alone, 12e9 / w, may take no less, so the
    # bound is at most w = 12e9 / 157.68 = 76.10 MB/s (the rest of the step adds a little).
    s = scenario(raw())
    b = write_bandwidth_for_budget(s, "hbf", simulate)
    assert b.value is not None and b.value < b.other <= b.value * (1 + REL_TOL)
    assert b.value <= 76.10e6 * 1.001
    assert b.value >= 76.10e6 * 0.99
    assert margin_at(with_write_bandwidth(s, "hbf", b.value), "hbf", simulate) >= 1
    assert margin_at(with_write_bandwidth(s, "hbf", b.other), "hbf", simulate) < 1


def test_steps_per_day_fixes_the_pace_so_write_bandwidth_does_not_move_wear():
    s = scenario(raw(budget={"steps_per_day": 10, "hbf": {"lifetime": "5 years"}}))
    assert write_bandwidth_for_budget(s, "hbf", simulate) is None


def test_write_bandwidth_to_match_host_checked_by_resimulation():
    s = scenario(raw())
    m = write_bandwidth_to_match_host(s, "hbf", simulate)
    assert m.placement["master"] == "dram" and m.placement["optimizer"] == "dram"
    b = m.write_bandwidth
    assert b.value is not None and b.value / b.other <= 1 + REL_TOL
    assert simulate(with_write_bandwidth(s, "hbf", b.value)).time_s <= m.host_step_s * (1 + 1e-9)
    assert simulate(with_write_bandwidth(s, "hbf", b.other)).time_s > m.host_step_s
    moved = s.model_copy(update={"placement": s.placement.model_copy(update=m.placement)})
    assert simulate(moved).time_s == m.host_step_s  # the host step is that placement's


# --- ranges ------------------------------------------------------------------------------------


def test_ranges_cover_every_combination_with_hand_lifetimes():
    s = scenario(raw())
    got = cases(s, "hbf", simulate)
    assert [(c.write_bandwidth.value, c.pe_cycles.value) for c in got] == [
        (w.value, e.value) for w in WRITE_BANDWIDTH for e in ENDURANCE
    ]
    assert {e.value for e in ENDURANCE} == {1000, 3000, 100_000}
    for c in got:
        # lifetime = P/E x span / (12 GB x 86,400 / step): the step as simulated
        per_day = 12e9 * DAY / c.step_s
        assert c.lifetime_days == pytest.approx(c.pe_cycles.value * 4e12 / per_day)
        assert c.span_bytes == 12e9  # master 4 GB + moments 8 GB homed on HBF
        assert c.span_lifetime_days == pytest.approx(c.pe_cycles.value * 12e9 / per_day)
        # 5 years = 1,825 days
        assert c.within_budget == (c.lifetime_days >= 1825)


def test_wear_break_even_cli_json_and_plot(cli, tmp_path):
    png = tmp_path / "ranges.png"
    code, out, err = cli(
        "wear",
        SCENARIOS / "llama2-7b-hbf-optimizer.yaml",
        "--break-even",
        "--format",
        "json",
        "--plot",
        png,
    )
    assert code == 0, err
    report = json.loads(out)
    be = report["break_even"]["hbf"]
    assert be["pe_cycles"]["now"] == 3000
    assert be["write_bandwidth_to_match_host"]["write_bandwidth"]["simulations"] >= 2
    assert len(report["ranges"]["cases"]) == 9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in err  # where it went, on stderr beside the JSON report


def test_plot_without_break_even_is_refused(cli, tmp_path):
    code, _, err = cli("wear", SCENARIOS / "llama2-7b-hbf-optimizer.yaml", "--plot", "x.png")
    assert code == 2 and "--break-even" in err and "Traceback" not in err


def test_the_least_pe_cycles_hold_the_budget_when_applied_back():
    s = scenario(raw())
    r = simulate(s)
    cf = closed_form(s, "hbf", assess(s, r)["hbf"])
    at = s.model_copy(deep=True)
    e = at.hardware.tiers["hbf"].endurance
    for cycles, holds in ((math.ceil(cf.pe_cycles), True), (math.floor(cf.pe_cycles), False)):
        tiers = dict(at.hardware.tiers)
        tiers["hbf"] = tiers["hbf"].model_copy(
            update={"endurance": e.model_copy(update={"pe_cycles": cycles})}
        )
        v = at.model_copy(update={"hardware": at.hardware.model_copy(update={"tiers": tiers})})
        assert assess(v, r)["hbf"].verdict.within_budget is holds


def test_plan_break_even_for_the_hbf_plan(cli, write):
    raw_plan = {**raw(), "plan": {"placement.optimizer": ["hbf", "dram"]}}
    path = write(raw_plan)
    code, out, err = cli("plan", path, "--break-even", "--format", "json", "--workers", "1")
    assert code == 0, err
    q = json.loads(out)["hbf_optimizer"]
    be = q["break_even"]
    assert be["overrides"] == ["placement.optimizer=hbf"]
    assert be["break_even"]["pe_cycles"]["now"] == 3000
    assert len(be["ranges"]["cases"]) == 9


# `plan --break-even --emit`: the best plan is written in text as in JSON (text once returned
# after the break-even block, before the emit: nothing written, nothing said).
EMIT_PLAN = """name: emitbe
model: {parameters: 1000000000, layers: 24}
training: {framework: deepspeed, micro_batch_size: 2, grad_accumulation: 4}
parallel: {data: 8, zero_stage: 2}
placement: {optimizer: hbf, master: dram}
hardware: {preset: h200-hbf}
budget: {hbf: {lifetime: 1 day}}
plan: {placement.optimizer: [hbf, dram]}
"""


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_plan_break_even_emits_the_best_plan_in_either_format(cli, write, tmp_path, fmt):
    out = tmp_path / "ds.json"
    code, stdout, err = cli("plan", write(EMIT_PLAN), "--break-even", "--emit", "deepspeed",
                            "--emit-out", out, "--format", fmt, "--workers", "1")  # fmt: skip
    assert code == 0, err  # docs/cli-reference.md, plan: "exit codes: 0 done"
    assert f"emitted (deepspeed): {out}" in err
    if fmt == "table":  # the break-even block is still there, beside the emit
        assert "For that HBF plan (placement.optimizer=hbf):" in stdout
    else:
        assert json.loads(stdout)["hbf_optimizer"]["break_even"]["overrides"] == [
            "placement.optimizer=hbf"
        ]
    ds = json.loads(out.read_text())
    # by hand from EMIT_PLAN (the plan varies only where the optimizer lives, which DeepSpeed's
    # file cannot say beside master weights in DRAM): 2 a micro-batch x 4 accumulated x 8 data
    # ranks = 64 samples a step; ZeRO stage 2; the schema's defaults: bf16 weights, AdamW
    assert ds["train_batch_size"] == 2 * 4 * 8
    assert ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 4
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["bf16"] == {"enabled": True}
    assert ds["optimizer"]["type"] == "AdamW"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_plan_break_even_says_nothing_was_emitted_in_either_format(cli, write, tmp_path, fmt):
    # test_plan_break_even_for_the_hbf_plan's scenario: master weights on HBF for 5 years wear
    # it out whichever way the optimizer goes, so no plan fits (its break-even still runs)
    out = tmp_path / "ds.json"
    path = write({**raw(), "plan": {"placement.optimizer": ["hbf", "dram"]}})
    code, stdout, err = cli("plan", path, "--break-even", "--emit", "deepspeed",
                            "--emit-out", out, "--format", fmt, "--workers", "1")  # fmt: skip
    assert code == 0, err
    assert "tiersim plan: --emit deepspeed: no plan fits, nothing written" in err
    assert "emitted" not in err and not out.exists()
    if fmt == "table":
        assert "No plan fits every tier and holds every wear budget." in stdout
    else:
        assert json.loads(stdout)["plans"] == []


def test_text_bounds_round_up_as_the_verdict_does():
    # least capacity 332.0339 TB: a ">=" bound pasted back must hold, so 332.04 TB as the
    # verdict's remedy says (fmt_bytes rounds to nearest: 332.03 TB, short of the bound)
    from tiersim.report.breakeven import break_even_text

    section = {
        "hbf": {
            "budget": "for 5 years",
            "margin": 0.5,
            "pe_cycles": {"least": None, "now": 3000},
            "wear_span_bytes": {"least": 2.0001e12, "now": 1e12},
            "retention_s": None,
            "capacity_bytes": {"least": 332.0339e12, "now": 4.1e12},
            "write_bandwidth_for_budget": {"most": None, "now": 50e9},
            "write_bandwidth_to_match_host": None,
        }
    }
    text = break_even_text(section)
    assert "capacity         >= 332.04 TB (now 4.10 TB)" in text
    assert "wear span        >= 2.01 TB (now 1.00 TB)" in text  # 2.0001 up to 2.01
