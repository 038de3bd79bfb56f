"""The accuracy targets the published runs are held to, each over the runs it names that
nothing was fitted to: Korthikanti et al. 2022 Table 5 (issue 5: mean 3 %, none over 6 %;
Calculon, an analytic model on the same table: 3.65 % and 8.9 %), every Megatron-LM run (mean
5 %, none over 10 %), the offload runs' step times (issue 18: mean 5 %, none over 10 %) and
every 2020-2022 run (mean 10 %, none over 20 %). `tiersim check-published --check` fails if any
of those is missed.

The modern group (issue 39: the NeMo 24.07 performance summary's DGX H100 FP8 runs, mean 5 %,
none over 10 %) is out of sample and reported with its verdict, but not enforced by `--check`
(`enforced: False`): nothing was fitted to it, and it is not yet met (docs/kernels.md says why).
"""

from __future__ import annotations

from collections.abc import Callable

from tiersim.core.records import record
from tiersim.groundtruth.published import Comparison, Reference, Summary

OFFLOAD = ("ma2025", "ren2021")  # the offload runs: Ma and Wang 2025, ZeRO-Offload
MODERN = ("nemo2407",)  # the NeMo 24.07 performance summary's DGX H100 runs (issue 39)


@record
class Target:
    name: str
    mean: float  # mean |error| at most
    max: float  # no |error| above
    selects: Callable[[Reference], bool]
    enforced: bool = True  # `check-published --check` fails when it is missed


TARGETS = (
    Target(
        "Korthikanti et al. 2022 Table 5", 0.03, 0.06, lambda r: r.name.startswith("korthikanti")
    ),
    Target(
        "Megatron-LM runs (Korthikanti, Narayanan, Smith)",
        0.05,
        0.10,
        lambda r: r.name.startswith(("korthikanti", "narayanan", "smith")),
    ),
    Target(
        "offload step times (ZeRO-Offload Fig. 8, Ma and Wang)",
        0.05,
        0.10,
        lambda r: r.name.startswith(OFFLOAD) and r.metric == "time_s",
    ),
    Target("all 2020-2022 runs", 0.10, 0.20, lambda r: not r.name.startswith(MODERN)),
    Target(
        "modern: NeMo 24.07 DGX H100 FP8 (out of sample, not enforced)",
        0.05,
        0.10,
        lambda r: r.name.startswith(MODERN),
        enforced=False,
    ),
)


@record
class Verdict:
    target: Target
    summary: Summary

    @property
    def met(self) -> bool:
        s = self.summary
        return s.mean_abs_error <= self.target.mean and s.max_abs_error <= self.target.max


def verdicts(comparisons: list[Comparison]) -> list[Verdict]:
    """Each target with the runs it counts (targets that count none are left out)."""
    out = []
    for target in TARGETS:
        errors = [
            abs(c.error)
            for c in comparisons
            if not c.reference.calibrates and target.selects(c.reference)
        ]
        if errors:
            summary = Summary(len(errors), sum(errors) / len(errors), max(errors))
            out.append(Verdict(target, summary))
    return out
