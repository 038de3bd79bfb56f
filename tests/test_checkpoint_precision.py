"""Daly's checkpoint arithmetic without cancellation: the expected lost work M - T/(e^(T/M) - 1)
at MTBFs from an hour to 1e9 s, and the expected wall time, against the same formulas in
50-digit decimal arithmetic (Decimal.exp is correctly rounded at the context's precision)."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest

from tiersim.analysis.checkpoint import expected_lost_work_s, expected_wall_s, recovery_s

MTBFS = (3600.0, 86400.0, 1e6, 1e7, 1e8, 1e9)  # an hour, a day, up to ~32 years
INTERVAL, STALL = 1800.0, 12.5  # T = 1812.5 s


def lost_reference(segment: float, mtbf: float) -> float:
    with localcontext() as ctx:
        ctx.prec = 50
        m, t = Decimal(mtbf), Decimal(segment)
        return float(m - t / ((t / m).exp() - 1))


def wall_reference(work: float, interval: float, stall: float, restart: float, mtbf: float):
    with localcontext() as ctx:
        ctx.prec = 50
        m, seg = Decimal(mtbf), Decimal(interval) + Decimal(stall)
        per_segment = m * (Decimal(restart) / m).exp() * ((seg / m).exp() - 1)
        return float(per_segment * Decimal(work) / Decimal(interval))


@pytest.mark.parametrize("mtbf", MTBFS)
def test_lost_work_is_exact_to_a_few_ulp(mtbf):
    # at M = 1e9 s, x = T/M = 1.8e-6: the lost work is T·(1/2 - x/12 + ...) ~ 906.25 s, and
    # M - T/expm1(x) carried an error of ~1e9 x 2.2e-16 = 2e-7 s (2e-10 of it)
    expected = lost_reference(INTERVAL + STALL, mtbf)
    assert expected_lost_work_s(INTERVAL, STALL, mtbf) == pytest.approx(expected, rel=1e-14)


def test_lost_work_tends_to_half_the_segment():
    # M -> inf: T/2 - T²/(12 M) = 906.25 - 1812.5² / 1.2e10 = 906.25 - 2.7376e-4 s
    lost = expected_lost_work_s(INTERVAL, STALL, 1e9)
    assert lost == pytest.approx(906.25 - 1812.5**2 / 12e9, rel=1e-15)
    assert recovery_s(300.0, 20.0, INTERVAL, STALL, 1e9) == pytest.approx(
        300.0 + 20.0 + 906.25 - 1812.5**2 / 12e9, rel=1e-15
    )


@pytest.mark.parametrize("x", (1e-12, 1e-3, 0.2499, 0.25, 0.2501, 3.0, 50.0))
def test_series_and_direct_forms_meet(x):
    # both sides of the series' threshold (0.25) against the decimal formula, M = T / x
    segment = 1000.0
    expected = lost_reference(segment, segment / x)
    assert expected_lost_work_s(segment, 0.0, segment / x) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("mtbf", MTBFS)
def test_expected_wall_time_needs_no_rewrite(mtbf):
    # M·e^(R/M)·expm1(T/M) is a product: no difference of near-equal terms, exact to a few ulp
    got = expected_wall_s(1e6, INTERVAL, STALL, 320.0, mtbf)
    assert got == pytest.approx(wall_reference(1e6, INTERVAL, STALL, 320.0, mtbf), rel=1e-14)
