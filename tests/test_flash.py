"""Flash as it behaves: wear span and endurance against retention, by hand arithmetic.

The step results are built by hand (test_wear's helpers: 105.84 GB written to HBF per
96 s step, 900 steps a day, on the h200-hbf preset's 4 TB HBF rated for 3,000 P/E cycles).
"""

from __future__ import annotations

import math

import pytest
from conftest import SCENARIOS, generic, scenario
from test_wear import HBF_OPT, raw, result

from tiersim.analysis.flash import (
    interference_bandwidths,
    pe_cycles_for_retention,
    retention_for_cycles,
)
from tiersim.config.schema import Endurance
from tiersim.report.wear import wear_section
from tiersim.runner import as_dies_allow, simulate

DAY = 86_400.0
YEAR = 365 * DAY
# the default curve's exponent from Cai et al. 2012's two points (1 year: 1x, 3 days: 46x)
K = math.log(46) / math.log(365 / 3)  # = 3.828641 / 4.801287 = 0.797420


def test_the_default_curve_exponent():
    assert pytest.approx(0.797420, abs=1e-6) == K


# --- wear span ---------------------------------------------------------------------------------
# 105.84 GB a step x 900 steps a day = 95.256 TB a day, levelled over 106 GB, not 4 TB:
#   P/E cycles a day = 95.256e12 / 106e9      = 898.64
#   lifetime         = 3,000 / 898.64          = 3.33838 days (125.976 days over 4 TB)
#   drive writes/day = 95.256 TB / 4 TB        = 23.814 (per user capacity, unchanged)
#   allowed (5 years)= 3,000 x 106 GB / 1,825  = 174.247 GB a day
#   most steps a day = 174.247 GB / 105.84 GB  = 1.64632


def test_wear_span_narrows_the_blocks_that_wear():
    s = scenario(raw({"wear_span": "106 GB"}))
    hbf = wear_section(s, result(HBF_OPT))["hbf"]
    assert hbf["wear_span_bytes"] == 106e9
    assert hbf["pe_cycles_per_day"] == pytest.approx(898.64, rel=1e-5)
    assert hbf["lifetime_days"] == pytest.approx(3.33838, rel=1e-5)
    assert hbf["drive_writes_per_day"] == pytest.approx(23.814)
    assert hbf["allowed_host_bytes_per_day"] == pytest.approx(174.247e9, rel=1e-5)
    assert hbf["remedies"]["max_steps_per_day"] == pytest.approx(1.64632, rel=1e-5)
    # more capacity adds no blocks to a fixed span: no capacity remedy
    assert hbf["remedies"]["capacity_bytes"] is None


def test_whole_device_span_is_the_default_and_adds_no_keys():
    whole = wear_section(scenario(raw({"wear_span": "4 TB"})), result(HBF_OPT))["hbf"]
    default = wear_section(scenario(raw()), result(HBF_OPT))["hbf"]
    assert whole["lifetime_days"] == pytest.approx(125.976, rel=1e-5)  # test_wear's base case
    assert default["lifetime_days"] == whole["lifetime_days"]
    assert "wear_span_bytes" not in default and "retention_s" not in default


def test_wear_span_larger_than_the_device_is_refused(cli):
    code, _, err = cli(
        "wear", SCENARIOS / "hbf-optimizer-state.yaml", "--set", "hardware.tiers.hbf.wear_span=5 TB"
    )
    assert code == 2
    assert "hardware.tiers.hbf" in err and "wear_span" in err and "capacity" in err
    assert "Traceback" not in err


# --- endurance against retention ---------------------------------------------------------------


def cycles(**keys: object) -> float:
    return pe_cycles_for_retention(Endurance(pe_cycles=3000, **keys))


def test_default_curve_points():
    assert cycles() == 3000  # no retention given: the rating
    assert cycles(retention="1 year") == pytest.approx(3000)
    assert cycles(retention="3 days") == pytest.approx(3000 * 46)  # 138,000
    # shorter than the curve's shortest point: that point's cycles, never extrapolated up
    assert cycles(retention="1 min") == pytest.approx(138_000)
    # halfway on log axes, sqrt(3 x 365) = 33.09 days: sqrt(46) = 6.78233 x 3,000
    assert cycles(retention=f"{math.sqrt(3 * 365) * DAY} s") == pytest.approx(20_347.0, rel=1e-4)
    # 2 years: the last segment continued down, 3,000 x 2^-0.79742 = 3,000 x 0.575351
    assert cycles(retention="2 years") == pytest.approx(1726.05, rel=1e-4)


def test_retention_for_cycles_inverts_the_curve():
    e = Endurance(pe_cycles=3000)
    assert retention_for_cycles(e, 3000) == pytest.approx(YEAR)
    assert retention_for_cycles(e, 138_000) == pytest.approx(3 * DAY)
    assert retention_for_cycles(e, 138_001) is None  # past the curve's reach
    # the points of test_default_curve_points, read back
    assert retention_for_cycles(e, 20_347.0) == pytest.approx(math.sqrt(3 * 365) * DAY, rel=1e-4)
    assert retention_for_cycles(e, 1726.05) == pytest.approx(2 * YEAR, rel=1e-4)


def test_enterprise_rating_moves_the_curve():
    # rated for 3 months (91.25 days): that point is (365 / 91.25)^k = 4^0.79742 = 3.02041x
    # of the 1-year rating, so 3 days gives 3,000 x 46 / 3.02041 = 45,689
    assert cycles(rated_retention="91.25 days", retention="3 days") == pytest.approx(
        45_689, rel=1e-4
    )


def test_own_curve_interpolates_log_log():
    curve = {"1 year": 3000, "1 day": 30_000}
    # slope = ln(3,000 / 30,000) / ln(365) = -2.302585 / 5.899897 = -0.390275
    # at 7 days: 30,000 x 7^-0.390275 = 30,000 x 0.467896 = 14,036.9
    assert cycles(retention_curve=curve, retention="7 days") == pytest.approx(14_036.9, rel=1e-4)
    assert cycles(retention_curve=curve, retention="1 h") == 30_000


def test_retention_lengthens_the_lifetime_in_the_report():
    s = scenario(raw({"endurance": {"pe_cycles": 3000, "retention": "3 days"}}))
    hbf = wear_section(s, result(HBF_OPT))["hbf"]
    assert hbf["pe_cycles"] == pytest.approx(138_000)
    assert hbf["pe_cycles_rated"] == 3000
    assert hbf["retention_s"] == 3 * DAY
    assert hbf["rated_retention_s"] == YEAR
    # 138,000 / 23.814 cycles a day = 5,794.91 days (46 x the 125.976 of the rating)
    assert hbf["lifetime_days"] == pytest.approx(5794.91, rel=1e-5)
    assert hbf["within_budget"] is True


@pytest.mark.parametrize(
    "curve", ["{1 year: 3000}", "{1 year: 3000, 1 day: 1000}", "{1 year: -5, 1 day: 30}"]
)
def test_bad_curves_are_refused(cli, curve):
    code, _, err = cli(
        "wear",
        SCENARIOS / "hbf-optimizer-state.yaml",
        "--set",
        f"hardware.tiers.hbf.endurance.retention_curve={curve}",
    )
    assert code == 2
    assert "retention_curve" in err and "Traceback" not in err


# --- the HBF preset of one stack count ---------------------------------------------------------
# SanDisk HBF gen 1 (DESIGN.md section 4): 512 GB per 16-die stack, up to 1.6 TB/s read per
# stack. The write bandwidth per stack, 6.25 GB/s, is the preset's assumption (not published).


def test_eight_stack_preset_takes_capacity_and_bandwidth_from_the_same_stacks():
    s = scenario(
        {"name": "x", "model": generic(1_000_000, 1), "hardware": {"preset": "h200-hbf-8stack"}}
    )
    hbf, link = s.hardware.tiers["hbf"], s.hardware.links["hbf"]
    stacks = {
        hbf.capacity / 512e9,
        hbf.read_bw / 1.6e12,
        link.bandwidth / 1.6e12,
        hbf.write_bw / 6.25e9,
    }
    assert stacks == {8.0}
    # everything but HBF and its link is h200-hbf's
    base = scenario({"name": "x", "model": generic(1_000_000, 1)})
    assert {n: t for n, t in s.hardware.tiers.items() if n != "hbf"} == {
        n: t for n, t in base.hardware.tiers.items() if n != "hbf"
    }
    assert s.hardware.gpu == base.hardware.gpu and s.hardware.network == base.hardware.network


# --- reads and programs on the same dies -------------------------------------------------------


def test_interference_bandwidths_by_hand():
    # 106 GB read at 1.6 TB/s: t_r = 0.06625 s; 105 GB written at 50 GB/s: t_w = 2.1 s;
    # the dies are busy 2.16625 s.
    #   suspend: writes get 50 GB/s x 2.1 / 2.16625     = 48.4708 GB/s (reads keep 1.6 TB/s)
    #   wait:    reads get 1.6 TB/s x 0.06625 / 2.16625 = 48.9325 GB/s (writes keep 50 GB/s)
    r, w = interference_bandwidths("suspend", 1.6e12, 50e9, 106e9, 105e9)
    assert (r, w) == (1.6e12, pytest.approx(48.4708e9, rel=1e-5))
    r, w = interference_bandwidths("wait", 1.6e12, 50e9, 106e9, 105e9)
    assert (r, w) == (pytest.approx(48.9325e9, rel=1e-5), 50e9)
    # nothing written: nothing to wait for
    assert interference_bandwidths("wait", 1.6e12, 50e9, 106e9, 0) == (1.6e12, 50e9)
    assert interference_bandwidths("none", 1.6e12, 50e9, 106e9, 105e9) == (1.6e12, 50e9)


def test_interference_in_the_simulated_step():
    plain = scenario(raw())
    first = simulate(plain)
    hbf = first.tiers["hbf"]
    t_r, t_w = hbf.bytes_read / 1.6e12, hbf.bytes_written / 50e9  # the preset's HBF ports
    for policy in ("suspend", "wait"):
        s = scenario(raw({"program_interference": policy}))
        got = simulate(s)
        assert got.time_s >= first.time_s  # sharing the dies never makes the step faster
        effective = as_dies_allow(s).hardware.tiers["hbf"]
        if policy == "suspend":
            assert effective.read_bw == 1.6e12
            assert effective.write_bw == pytest.approx(50e9 * t_w / (t_w + t_r))
        else:
            assert effective.write_bw == 50e9
            assert effective.read_bw == pytest.approx(1.6e12 * t_r / (t_r + t_w))
    assert as_dies_allow(plain) is plain  # the key left out: the scenario as it was
    s = scenario(raw({"program_interference": "wait"}))
    assert wear_section(s, first)["hbf"]["program_interference"] == "wait"
    assert "program_interference" not in wear_section(plain, first)["hbf"]
