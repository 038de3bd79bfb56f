"""Priced answers: what a run costs per million tokens, GPU-hours and tier capital together.

Pure arithmetic over a scenario's prices and a run's JSON report (its tiers, wear and
goodput); no I/O. Prices are the scenario's: `hardware.price_per_gpu_hour` (one GPU and its
share of the host, an hour) and `hardware.tiers.<tier>.price_per_gb` (capital per decimal GB),
written off over `hardware.amortization` (default 5 years, assumed).

Per GPU and hour trained:
    tier capital  = price_per_gb x capacity / 1e9
    replaced every  min(amortization, the tier's wear lifetime)  (flash bought again as it
                    wears out: its P/E cycles or its drive's rated bytes, whichever first)
    day share     = budget.steps_per_day / the steps a day the step allows back to back
                    (at most 1; 1 without a steps_per_day: training 24/7)
    tier cost/h   = capital / (that period in hours x day share): the capital is bought for
                    the calendar (its wear lifetime is in days at budget.steps_per_day) and
                    falls on the hours trained, so a tier worn out after N steps costs
                    capital / N a step whatever the pace
    cost/h        = price_per_gpu_hour + the tiers' cost/h
    cost per 1M tokens = GPUs x cost/h / (goodput tokens/s x 3,600) x 1e6
A tier the run neither holds state on nor moves bytes through is not counted as bought (the
"4 TB HBF or twice the DRAM" comparison prices only what each design uses).
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.core.records import record
from tiersim.core.units import DAY_S, YEAR_S

DEFAULT_AMORTIZATION_S = 5 * YEAR_S  # assumed: a common depreciation period for servers
HOUR_S = 3600.0
# the unit every price and cost is shown in: the schema's prices carry no currency
# (price_per_gpu_hour "any currency", tiers' price_per_gb "the one price_per_gpu_hour is
# in"), so a cost is in whatever unit the scenario's prices were given in, named so
PRICE_UNIT = "price units"


@record
class TierCost:
    tier: str
    price_per_gb: float
    capacity_bytes: float
    lifetime_s: float  # the tier's wear lifetime (inf: it does not wear)
    amortization_s: float
    day_share: float = 1.0  # the share of each day spent training (`training_share_of_day`)

    @property
    def capital(self) -> float:
        return self.price_per_gb * self.capacity_bytes / 1e9

    @property
    def replaced_every_s(self) -> float:
        return min(self.amortization_s, self.lifetime_s)

    @property
    def worn_out_first(self) -> bool:
        return self.lifetime_s < self.amortization_s

    @property
    def per_gpu_hour(self) -> float:
        """Per GPU and hour trained."""
        return self.capital / (self.replaced_every_s / HOUR_S * self.day_share)


@record
class Costing:
    gpus: int
    price_per_gpu_hour: float | None
    tiers: dict[str, TierCost]
    goodput_tokens_per_s: float

    @property
    def per_gpu_hour(self) -> float:
        return (self.price_per_gpu_hour or 0.0) + sum(t.per_gpu_hour for t in self.tiers.values())

    @property
    def per_hour(self) -> float:
        return self.gpus * self.per_gpu_hour

    @property
    def per_million_tokens(self) -> float:
        per_hour_tokens = self.goodput_tokens_per_s * HOUR_S
        return self.per_hour / per_hour_tokens * 1e6 if per_hour_tokens > 0 else math.inf


def job_gpus(s: Scenario) -> int:
    """The job's GPUs, the mesh's world: data x tensor x pipeline x context (the plan's
    `costs_of` takes the same; without context a context-parallel run was priced at 1/c of
    its GPUs)."""
    return Mesh.of(s.parallel).world


def goodput_tokens_per_s(report: dict[str, Any]) -> float:
    """Tokens per second after checkpoint stalls and, with a failure rate, lost work."""
    share = (report.get("checkpoint") or {}).get("goodput")
    return report["step"]["tokens_per_s"] * (1.0 if share is None else share)


def wear_lifetime_s(report: dict[str, Any], tier: str) -> float:
    """The first of the tier's P/E lifetime and its rated bytes' (inf: it does not wear)."""
    w = (report.get("wear") or {}).get(tier) or {}
    days = [d for d in (w.get("lifetime_days"), w.get("rated_lifetime_days")) if d is not None]
    return min(days) * DAY_S if days else math.inf


def training_share_of_day(report: dict[str, Any]) -> float:
    """The share of each day spent training: the wear section's steps a day (its
    budget.steps_per_day) over the steps the simulated step allows back to back, at most 1;
    1 where no tier reports wear."""
    for w in (report.get("wear") or {}).values():
        given, possible = w.get("steps_per_day"), w.get("steps_per_day_possible")
        if given and possible:
            return min(1.0, given / possible)
    return 1.0


def used(report: dict[str, Any], tier: str) -> bool:
    t = report["tiers"].get(tier) or {}
    moved = t.get("bytes_read_per_step", 0) or t.get("bytes_written_per_step", 0)
    return bool(t.get("resident_bytes", 0) or t.get("peak_bytes", 0) or moved)


def priced(s: Scenario) -> bool:
    """Whether the scenario gives any price (else no cost is reported)."""
    hw = s.hardware
    return hw.price_per_gpu_hour is not None or any(
        t.price_per_gb is not None for t in hw.tiers.values()
    )


def tier_prices(s: Scenario) -> dict[str, float]:
    return {n: t.price_per_gb for n, t in s.hardware.tiers.items() if t.price_per_gb is not None}


def costing(s: Scenario, report: dict[str, Any]) -> Costing | None:
    """The run's cost, or None where the scenario gives no price."""
    if not priced(s):
        return None
    hw = s.hardware
    return costing_of(job_gpus(s), hw.price_per_gpu_hour, tier_prices(s), hw.amortization, report)


def costing_of(
    gpus: int,
    price_per_gpu_hour: float | None,
    prices: dict[str, float],
    amortization_s: float | None,
    report: dict[str, Any],
) -> Costing:
    """`costing` from the prices themselves (a plan's candidates carry them, not a scenario)."""
    amortization, share = amortization_s or DEFAULT_AMORTIZATION_S, training_share_of_day(report)
    tiers = {
        name: TierCost(
            name,
            price,
            report["tiers"][name]["capacity_bytes"],
            wear_lifetime_s(report, name),
            amortization,
            share,
        )
        for name, price in prices.items()
        if name in report["tiers"] and used(report, name)
    }
    return Costing(gpus, price_per_gpu_hour, tiers, goodput_tokens_per_s(report))


def price_per_gb_to_match(c: Costing, tier: str, per_million_tokens: float) -> float | None:
    """The price per GB of `tier` at which `c` costs `per_million_tokens` (its cost is linear
    in that price); None where the tier is not priced in `c` or no price >= 0 reaches it."""
    t = c.tiers.get(tier)
    if t is None or c.goodput_tokens_per_s <= 0:
        return None
    budget_per_gpu_hour = per_million_tokens / 1e6 * c.goodput_tokens_per_s * HOUR_S / c.gpus
    rest = c.per_gpu_hour - t.per_gpu_hour
    # per (price per GB) and hour trained
    per_gb_hour = t.capacity_bytes / 1e9 / (t.replaced_every_s / HOUR_S * t.day_share)
    price = (budget_per_gpu_hour - rest) / per_gb_hour
    return price if price >= 0 else None


def lifetime_to_match(c: Costing, tier: str, per_million_tokens: float) -> float | None:
    """The wear lifetime (s) of `tier` at which `c` costs `per_million_tokens`: its capital
    bought that often; None where the tier is not priced, or where even lasting the whole
    amortization would cost more (only a lower price would do)."""
    t = c.tiers.get(tier)
    if t is None or c.goodput_tokens_per_s <= 0:
        return None
    allowed = per_million_tokens / 1e6 * c.goodput_tokens_per_s * HOUR_S / c.gpus
    allowed -= c.per_gpu_hour - t.per_gpu_hour  # what the tier may cost an hour
    if allowed <= 0:
        return None
    life_s = t.capital / (allowed * t.day_share) * HOUR_S  # capital / (life x day share)
    return life_s if life_s <= t.amortization_s else None
