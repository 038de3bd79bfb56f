"""`tiersim check-published`: run every published scenario, print predicted vs published."""

from __future__ import annotations

import argparse
from pathlib import Path

from tiersim.cli.commands.common import add_check_arg, add_format_arg
from tiersim.core.errors import InputError, Problem
from tiersim.groundtruth.published import (
    REFERENCES,
    STEP_PARTS,
    Comparison,
    Summary,
    load_references,
    published_dir,
    source_of,
    summarize,
    summarize_by_source,
)
from tiersim.groundtruth.targets import TARGETS, Verdict, verdicts

EXIT_CHECK_FAILED = 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check-published",
        help="run the published scenarios and compare predicted with measured step times",
        description="Simulate every scenario in scenarios/published/ and print its predicted "
        "iteration time against the published measurement, with the relative error, and each "
        "accuracy target over the runs it counts (runs a constant was fitted to are shown, not "
        "counted): "
        + "; ".join(f"{t.name}: mean within {t.mean:.0%}, none above {t.max:.0%}" for t in TARGETS)
        + ". The 2020-2022 reference runs are on A100 or V100 GPUs; the modern group (NeMo "
        "24.07's DGX H100 FP8 runs) is reported, not enforced by --check.",
    )
    parser.add_argument(
        "--folder",
        type=Path,
        default=None,
        help=f"folder with references.yaml and the scenarios (default: {published_dir()})",
    )
    add_format_arg(parser)
    add_check_arg(
        parser,
        EXIT_CHECK_FAILED,
        "any enforced accuracy target is missed (the modern group's NOT MET does not count)",
    )
    parser.set_defaults(handler=run)


def _predicted(ref, overrides: tuple[str, ...] = ()) -> float:
    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate

    return getattr(simulate(load_scenario(ref.scenario, list(overrides)).scenario), ref.metric)


def _loso(folder: Path | None) -> str:
    """Leave one source out (groundtruth/loso.py), and the fitted constants it cannot take
    away (no value without their source)."""
    from tiersim.groundtruth.loso import leave_one_source_out

    refs = load_references(folder)
    found = leave_one_source_out(refs, _predicted)
    if not found:
        return ""
    lines = ["leave one source out (each constant fitted on end-to-end runs, without its source):"]
    for lo in found:
        lines.append(
            f"  {lo.source} ({', '.join(lo.overrides)}): {lo.with_fit.count} runs, mean |error| "
            f"{lo.with_fit.mean_abs_error:.1%} with the fit, {lo.without_fit.mean_abs_error:.1%} "
            f"without (max {lo.with_fit.max_abs_error:.1%}, {lo.without_fit.max_abs_error:.1%})"
        )
    left = {source_of(r) for r in refs if r.unfitted}
    rest = sorted({r.calibrates for r in refs if r.calibrates and source_of(r) not in left})
    for fitted in rest:
        lines.append(f"  not left out (no value without its source): {fitted}")
    return "\n" + "\n".join(lines)


def compare_all(folder: Path | None) -> list[Comparison]:
    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate  # the engine's entry point

    out = []
    for ref in load_references(folder):
        scenario = load_scenario(ref.scenario).scenario
        result = simulate(scenario)
        on_gpu = scenario.placement.optimizer_compute == "gpu"
        optimizer = result.optimizer_s if on_gpu else result.exposed_cpu_s
        out.append(
            Comparison(ref, getattr(result, ref.metric), result.breakdown, result.time_s, optimizer)
        )
    return out


# the columns of Comparison.parts, which add up to the predicted figure
BREAKDOWN = (
    ("gemm_s", "GEMM s"),
    ("memory_bound_s", "memory s"),
    ("framework_s", "calib. s"),  # parallel.pipeline_engine_overhead: a user's calibration
    ("collectives_s", "collect. s"),
    ("bubble_s", "bubble s"),
    ("imbalance_s", "imbal. s"),
    ("optimizer_s", "optim. s"),
    ("other_s", "other s"),
)
assert tuple(key for key, _ in BREAKDOWN) == STEP_PARTS


def _parts(c: Comparison) -> tuple[str, ...]:
    parts = c.parts()
    if parts is None:
        return ("-",) * len(BREAKDOWN)
    return tuple(fmt_seconds(parts[key]) if key in parts else "-" for key, _ in BREAKDOWN)


def _by_source(comparisons: list[Comparison]) -> str:
    lines = ["per source (runs nothing was fitted to):"]
    for source, summary in summarize_by_source(comparisons).items():
        fitted = sum(
            1 for c in comparisons if source_of(c.reference) == source and c.reference.calibrates
        )
        also = f" ({fitted} fitted run{'s' if fitted > 1 else ''} not counted)" if fitted else ""
        if summary is None:
            lines.append(f"  {source}: only fitted runs{also}")
            continue
        runs = f"{summary.count} run{'s' if summary.count > 1 else ''}"
        lines.append(
            f"  {source}: {runs}, mean |error| {summary.mean_abs_error:.1%}, max "
            f"{summary.max_abs_error:.1%}{also}"
        )
    return "\n".join(lines)


def fmt_seconds(value: float) -> str:
    """4 significant digits, zeros kept (runs span 0.24 s to 112 s): 0.2400, 60.10, 1000."""
    return f"{value:#.4g}".rstrip(".")


def table(comparisons: list[Comparison], summary: Summary) -> str:
    from tiersim.report.table import render

    rows = [
        (
            c.reference.name,
            fmt_seconds(c.predicted_s),
            fmt_seconds(c.reference.iteration_time_s)
            + ("*" if c.reference.derived else "")
            + ("+" if c.reference.metric == "optimizer_s" else ""),
            f"{round(c.error, 3) + 0.0:+.1%}" + (" fit" if c.reference.calibrates else ""),
            *_parts(c),
        )
        for c in comparisons
    ]
    fitted = [c.reference for c in comparisons if c.reference.calibrates]
    notes = "".join(f"\n  {r.name}: {r.calibrates}" for r in fitted)
    return (
        render(
            ["scenario", "predicted s", "published s", "error", *(h for _, h in BREAKDOWN)], rows
        )
        + "\n\n"
        + _by_source(comparisons)
        + "\n"
        + _targets(verdicts(comparisons))
        + (
            "\n* derived from a published throughput (see references.yaml)"
            if any(c.reference.derived for c in comparisons)
            else ""
        )
        + (
            "\n+ the optimizer's time in the step, not the step (a table of optimizer times): "
            "its row is that time, in optim. s"
            if any(c.reference.metric == "optimizer_s" for c in comparisons)
            else ""
        )
        + _PARTS_NOTE
        + (f"\nfit: a calibration run, not counted; what was fitted to it:{notes}" if notes else "")
    )


_PARTS_NOTE = (
    "\nthe parts, GEMM s to other s, add up to the predicted figure:"
    "\n  GEMM, memory-bound kernels, blocking collectives, pipeline fill and drain, stage"
    "\n    imbalance: the model's prices of the step;"
    "\n  calib. s: what parallel.pipeline_engine_overhead adds, a calibration of one's own run"
    "\n    (a fit where the run says so), not a property of any framework;"
    "\n  optim. s: the GPU optimizer's step, or the step's wait on a CPU optimizer;"
    "\n  other s: what no price covers (waits on links, kernels no price counts)"
)


def _targets(found: list[Verdict]) -> str:
    lines = ["targets (runs nothing was fitted to):"]
    for v in found:
        s, t = v.summary, v.target
        runs = f"{s.count} run{'s' if s.count > 1 else ''}"
        lines.append(
            f"  {t.name}: {runs}, mean |error| {s.mean_abs_error:.1%} (<= {t.mean:.0%}), max "
            f"{s.max_abs_error:.1%} (<= {t.max:.0%}): {'met' if v.met else 'NOT MET'}"
        )
    return "\n".join(lines)


def _left_out_json(lo) -> dict:
    return {
        "source": lo.source,
        "fitted": lo.fitted,
        "overrides": list(lo.overrides),
        "with_fit": vars(lo.with_fit),
        "without_fit": vars(lo.without_fit),
    }


def as_json(comparisons: list[Comparison], summary: Summary, left_out=()) -> str:
    """The table as JSON; `left_out`: the leave-one-source-out results (groundtruth/loso.py)."""
    from tiersim.report.json_report import to_json

    return to_json(
        {
            "runs": [
                {
                    "scenario": c.reference.name,
                    "predicted_s": c.predicted_s,
                    "published_s": c.reference.iteration_time_s,
                    "error": c.error,
                    "derived": c.reference.derived,
                    "calibrates": c.reference.calibrates or None,
                    "source": c.reference.source,
                    "metric": c.reference.metric,
                    "breakdown": c.breakdown,
                    "parts": c.parts(),
                }
                for c in comparisons
            ],
            "counted_runs": summary.count,
            "mean_abs_error": summary.mean_abs_error,
            "max_abs_error": summary.max_abs_error,
            "within_targets": all(v.met for v in verdicts(comparisons) if v.target.enforced),
            "targets": [
                {
                    "name": v.target.name,
                    "mean_target": v.target.mean,
                    "max_target": v.target.max,
                    "runs": v.summary.count,
                    "mean_abs_error": v.summary.mean_abs_error,
                    "max_abs_error": v.summary.max_abs_error,
                    "met": v.met,
                    "enforced": v.target.enforced,
                }
                for v in verdicts(comparisons)
            ],
            "leave_one_source_out": [_left_out_json(lo) for lo in left_out],
            "by_source": {
                source: None if x is None else vars(x)
                for source, x in summarize_by_source(comparisons).items()
            },
        }
    )


def run(args: argparse.Namespace) -> int:
    comparisons = compare_all(args.folder)
    if all(c.reference.calibrates for c in comparisons):
        where = str((args.folder or published_dir()) / REFERENCES)
        why = "every run is a calibration run: nothing left to check the model against"
        raise InputError(
            where, [Problem("", f"{why} (expected a run without 'calibrates')", "E-PUBLISHED")]
        )
    summary = summarize(comparisons)
    if args.format == "json":
        from tiersim.groundtruth.loso import leave_one_source_out

        left_out = leave_one_source_out(load_references(args.folder), _predicted)
        print(as_json(comparisons, summary, left_out))
    else:
        print(table(comparisons, summary) + _loso(args.folder))
    missed = not all(v.met for v in verdicts(comparisons) if v.target.enforced)
    return EXIT_CHECK_FAILED if args.check and missed else 0
