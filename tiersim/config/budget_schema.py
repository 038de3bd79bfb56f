"""The scenario format's `budget` section: optimizer steps a day and each flash tier's write
budget (DESIGN.md §1, Flash wear). Field names are the public YAML format: extend, never
rename."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from tiersim.config.fields import Duration, Size, Strict


class TierBudget(Strict):
    """A flash tier's write budget: exactly one of the three."""

    lifetime: Duration | None = None  # the tier must last this long (e.g. 5 years)
    drive_writes_per_day: Annotated[float, Field(gt=0)] | None = None  # capacity writes a day
    total_bytes_written: Size | None = None  # bytes over the warranty (e.g. 10 PB)

    @model_validator(mode="after")
    def _one(self) -> TierBudget:
        kinds = ("lifetime", "drive_writes_per_day", "total_bytes_written")
        given = [k for k in kinds if getattr(self, k) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "none"
            hint = f"; set all but one to null, e.g. --set ...{given[0]}=null" if given else ""
            raise ValueError(f"give exactly one of {', '.join(kinds)} (got {got}{hint})")
        return self


class Budget(Strict):
    """`steps_per_day`, plus one entry per flash tier: `budget.hbf: {lifetime: 5 years}`."""

    steps_per_day: Annotated[float, Field(gt=0, le=1e9)] | None = None  # 1e9: one per 86 us
    tiers: dict[str, TierBudget] = Field(default_factory=dict)  # each flash tier's, by name

    @model_validator(mode="before")
    @classmethod
    def _gather_tiers(cls, data: Any) -> Any:
        """Tier entries beside `steps_per_day` (the documented form) go under `tiers`, merged
        key by key into any `tiers` given too (a `--set budget.hbf.x` onto a written file)."""
        if not isinstance(data, dict) or not isinstance(data.get("tiers", {}), dict):
            return data
        tiers = dict(data.get("tiers", {}))
        for name, entry in data.items():
            if name in ("steps_per_day", "tiers"):
                continue
            known = tiers.get(name)
            both = isinstance(known, dict) and isinstance(entry, dict)
            tiers[name] = {**known, **entry} if both else entry
        rest = {k: v for k, v in data.items() if k == "steps_per_day"}
        return {**rest, "tiers": tiers}
