"""Published measurements of large training runs, and how far a prediction lands from them.

The runs ship as ordinary scenario files in the repository's `scenarios/published/` folder
(the scenario schema rejects unknown keys, so the reference values live beside them, in
`references.yaml`: scenario file -> iteration_time_s, source, derived, notes[, tflops_per_gpu,
calibrates]). A run with `calibrates` is one a figure of its scenario was fitted to (it names
the figure): it is shown, but not counted in the errors, which would flatter them.
They are repository data, not package data: a source checkout or an editable install finds
them by default; anything else passes the folder explicitly.

Targets (issue 5): mean absolute relative error within 10 %, none above 20 %.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tiersim.config.yamlfile import read_yaml_and_text
from tiersim.config.yamllines import with_lines
from tiersim.core.errors import InputError, Problem, shown
from tiersim.core.records import record

REFERENCES = "references.yaml"
MEAN_ERROR_TARGET = 0.10
MAX_ERROR_TARGET = 0.20
_KEYS = {
    "iteration_time_s",
    "derived",
    "source",
    "notes",
    "tflops_per_gpu",
    "calibrates",
    "metric",
    "unfitted",
    "fit",
}
# what a published time is compared with: the step, or (a table of optimizer times) the
# optimizer's own time in the step
METRICS = ("time_s", "optimizer_s")
_REQUIRED = {"iteration_time_s", "derived", "source"}


@record
class Reference:
    """One published run: its scenario file and measured iteration time."""

    scenario: Path
    iteration_time_s: float
    source: str
    derived: bool  # computed from a published throughput rather than read as a time
    notes: str = ""
    tflops_per_gpu: float | None = None
    calibrates: str = ""  # the scenario figure fitted to this run, if any
    metric: str = "time_s"  # the simulated figure compared: StepResult.time_s or optimizer_s
    # on a run a constant was fitted to: `--set` overrides that take the fit away (the value
    # without this source), for the leave-one-source-out check (groundtruth/loso.py)
    unfitted: tuple[str, ...] = ()
    # a constant fitted on this run's source outside the runs compared here (a layer of the
    # same paper, say): what it is, for the leave-one-source-out check with `unfitted`
    fit: str = ""

    @property
    def name(self) -> str:
        return self.scenario.stem


# the step's parts, in the order shown: the model's prices (step.breakdown), the optimizer's
# part of the step, and what no price covers
STEP_PARTS = (
    "gemm_s",
    "memory_bound_s",
    "framework_s",
    "collectives_s",
    "bubble_s",
    "imbalance_s",
    "optimizer_s",
    "other_s",
)


@record
class Comparison:
    reference: Reference
    predicted_s: float
    breakdown: dict[str, float] | None = None  # the model's prices (step.breakdown)
    step_s: float | None = None  # the simulated step (predicted_s where the metric is time_s)
    # the step's time on the optimizer: the GPU optimizer's step, or the GPU's wait on a CPU one
    optimizer_in_step_s: float = 0.0

    @property
    def error(self) -> float:
        """Signed relative error: predicted / published - 1."""
        return self.predicted_s / self.reference.iteration_time_s - 1.0

    def parts(self) -> dict[str, float] | None:
        """The predicted figure in parts that add up to it (None: the model gave no prices).
        A step: STEP_PARTS, `other_s` being what no price covers (waits on links, kernels no
        price counts); the optimizer's time (metric optimizer_s): `optimizer_s` alone, since
        the step's prices say nothing of it."""
        if self.reference.metric == "optimizer_s":
            return {"optimizer_s": self.predicted_s}
        if self.breakdown is None:
            return None
        step = self.predicted_s if self.step_s is None else self.step_s
        out = {k: self.breakdown.get(k, 0.0) for k in STEP_PARTS[:-2]}
        out["optimizer_s"] = self.optimizer_in_step_s
        other = step - sum(out.values())
        # sums of the same kernels in different orders: a difference within their rounding
        # (relative 1e-9) is no time at all
        out["other_s"] = other if abs(other) > 1e-9 * step else 0.0
        return out


@record
class Summary:
    count: int
    mean_abs_error: float
    max_abs_error: float

    @property
    def within_targets(self) -> bool:
        return self.mean_abs_error <= MEAN_ERROR_TARGET and self.max_abs_error <= MAX_ERROR_TARGET


def published_dir() -> Path:
    """The repository's scenarios/published folder (source checkouts and editable installs)."""
    return Path(__file__).resolve().parents[2] / "scenarios" / "published"


def _entry_problems(name: Any, entry: Any, folder: Path) -> list[Problem]:
    if not isinstance(name, str) or not name.strip():
        return [Problem(shown(name), "expected a scenario file name as the key", "E-PUBLISHED")]
    if not isinstance(entry, dict):
        return [
            Problem(
                name,
                "expected a mapping with iteration_time_s, derived, source",
                "E-PUBLISHED",
            )
        ]
    known = ", ".join(sorted(_KEYS))
    problems = [
        Problem(f"{name}.{k}", f"unknown key '{k}' (expected one of: {known})", "E-PUBLISHED")
        for k in sorted(set(entry) - _KEYS)
    ]
    problems += [
        Problem(name, f"missing '{k}'", "E-PUBLISHED") for k in sorted(_REQUIRED - set(entry))
    ]
    time_s = entry.get("iteration_time_s")
    if "iteration_time_s" in entry and not (
        isinstance(time_s, int | float) and math.isfinite(time_s) and time_s > 0
    ):
        problems.append(
            Problem(f"{name}.iteration_time_s", f"must be > 0 (got {time_s!r})", "E-PUBLISHED")
        )
    fitted = entry.get("calibrates")
    if "calibrates" in entry and not (isinstance(fitted, str) and fitted.strip()):
        what = f"expected the scenario figure fitted to this run (got {fitted!r})"
        problems.append(Problem(f"{name}.calibrates", what, "E-PUBLISHED"))
    fit = entry.get("fit")
    if "fit" in entry and not (isinstance(fit, str) and fit.strip() and entry.get("unfitted")):
        what = (
            f"expected the constant fitted on this source elsewhere, with the 'unfitted' "
            f"overrides that take it away (got {fit!r})"
        )
        problems.append(Problem(f"{name}.fit", what, "E-PUBLISHED"))
    unfitted = entry.get("unfitted", [])
    if not (isinstance(unfitted, list) and all(isinstance(u, str) and "=" in u for u in unfitted)):
        what = f"expected a list of PATH=VALUE overrides (got {unfitted!r})"
        problems.append(Problem(f"{name}.unfitted", what, "E-PUBLISHED"))
    metric = entry.get("metric", "time_s")
    if metric not in METRICS:
        expected = " or ".join(repr(m) for m in METRICS)
        problems.append(
            Problem(f"{name}.metric", f"expected {expected} (got {metric!r})", "E-PUBLISHED")
        )
    if not (folder / name).is_file():
        problems.append(Problem(name, f"no scenario file {name} in {folder}", "E-PUBLISHED"))
    return problems


def load_references(folder: Path | None = None) -> list[Reference]:
    """Every reference in `folder`/references.yaml, in file order; all problems at once."""
    folder = Path(folder) if folder is not None else published_dir()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        why = f"{what} (expected a folder holding {REFERENCES} and its scenarios)"
        raise InputError("--folder", [Problem(str(folder), why, "E-PUBLISHED")])
    path = folder / REFERENCES
    raw, text = read_yaml_and_text(path, str(path))
    if not isinstance(raw, dict) or not raw:
        raise InputError(
            str(path),
            [Problem("", "expected a mapping: scenario file -> entry", "E-PUBLISHED")],
        )
    problems = [p for name, entry in raw.items() for p in _entry_problems(name, entry, folder)]
    if problems:  # each with the line of its key
        raise with_lines(InputError(str(path), problems), text)
    return [
        Reference(
            scenario=folder / name,
            iteration_time_s=float(e["iteration_time_s"]),
            source=" ".join(str(e["source"]).split()),
            derived=bool(e["derived"]),
            notes=" ".join(str(e.get("notes", "")).split()),
            tflops_per_gpu=e.get("tflops_per_gpu"),
            calibrates=" ".join(str(e.get("calibrates", "")).split()),
            metric=e.get("metric", "time_s"),
            unfitted=tuple(e.get("unfitted", ())),
            fit=" ".join(str(e.get("fit", "")).split()),
        )
        for name, e in raw.items()
    ]


def source_of(ref: Reference) -> str:
    """The publication a run comes from: its source up to the first comma ('Smith et al.
    2022')."""
    return ref.source.split(",")[0].strip()


def summarize_by_source(comparisons: list[Comparison]) -> dict[str, Summary | None]:
    """Errors per publication over its runs nothing was fitted to (None: all were fitted)."""
    out: dict[str, Summary | None] = {}
    for source in dict.fromkeys(source_of(c.reference) for c in comparisons):
        mine = [c for c in comparisons if source_of(c.reference) == source]
        counted = [c for c in mine if not c.reference.calibrates]
        out[source] = summarize(counted) if counted else None
    return out


def summarize(comparisons: list[Comparison]) -> Summary:
    """Errors over the runs nothing was fitted to."""
    errors = [abs(c.error) for c in comparisons if not c.reference.calibrates]
    if not errors:
        raise ValueError("no comparisons to summarize (calibration runs are not counted)")
    return Summary(len(errors), sum(errors) / len(errors), max(errors))
