"""Leave one source out (issue 39): every constant fitted on end-to-end runs, predicted on its
own source without its fit. A run a constant was fitted to names, in references.yaml, the
`--set` overrides that take the fit away (`unfitted`: the value the constant has without that
source: none, or the GPU's own figure from another measurement); a constant fitted on the source
outside the runs compared (Korthikanti et al.'s Table 4 layer for the A100's efficiency, whose
Table 5 runs are compared) names itself in `fit` instead. Each run of the same source is
simulated with them, and its error is what the fit would be worth had the source been left out.
A constant fitted on one source only has no value at all without it, so this is the honest
out-of-sample figure for it; the other sources' errors (check-published's table) already are
out of sample for it.
"""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.groundtruth.published import Reference, Summary, source_of


@record
class LeftOut:
    source: str
    fitted: str  # what was fitted (the calibrating runs' `calibrates`)
    overrides: tuple[str, ...]
    with_fit: Summary  # the source's runs, fitted ones included, as shipped
    without_fit: Summary  # the same runs with the overrides


def _summary(errors: list[float]) -> Summary:
    return Summary(len(errors), sum(map(abs, errors)) / len(errors), max(map(abs, errors)))


def leave_one_source_out(references: list[Reference], simulate_ref) -> list[LeftOut]:
    """For each source with `unfitted` overrides: its runs' errors with the fit and without.
    `simulate_ref(ref, overrides)` is the predicted figure of one run."""
    out = []
    for source in dict.fromkeys(source_of(r) for r in references):
        runs = [r for r in references if source_of(r) == source]
        overrides = tuple(o for r in runs for o in r.unfitted)
        if not overrides:
            continue
        fitted = "; ".join(r.calibrates or r.fit for r in runs if r.unfitted)
        with_fit = [simulate_ref(r, ()) / r.iteration_time_s - 1 for r in runs]
        without = [simulate_ref(r, overrides) / r.iteration_time_s - 1 for r in runs]
        out.append(LeftOut(source, fitted, overrides, _summary(with_fit), _summary(without)))
    return out
