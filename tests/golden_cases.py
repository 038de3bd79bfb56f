"""The golden cases: every shipped scenario, and a sample of each shipped sweep's points.

Reports are produced through the CLI's entry point (`tiersim run --format json`), the one
interface a restructuring of the package must keep, so the same code captures them before a
change (tests/golden/capture.py) and checks them after it (tests/test_golden.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

# Fields that are measurements of the simulator itself, not results: left out of the comparison
# (none since report.json lost sim.wall_s, the engine's wall-clock time: it is a pure function
# of the scenario and the version).
VOLATILE: tuple[tuple[str, ...], ...] = ()

# A sample of each shipped sweep: its corners and one inner point (the full hbf-wear sweep
# takes minutes), as --set overrides on its base scenario.
SWEEP_SAMPLES: dict[str, tuple[str, list[list[str]]]] = {
    "sweep-hbf-write-vs-accumulation": (
        "llama2-7b-hbf-optimizer.yaml",
        [
            [f"hardware.tiers.hbf.write_bandwidth={bw}", f"training.grad_accumulation={ga}"]
            for bw in ("10 GB/s", "100 GB/s")
            for ga in (1, 16)
        ]
        + [["hardware.tiers.hbf.write_bandwidth=25 GB/s", "training.grad_accumulation=4"]],
    ),
    "sweep-hbf-wear": (
        "hbf-optimizer-state.yaml",
        [
            [
                f"hardware.tiers.hbf.write_bandwidth={bw}",
                f"hardware.tiers.hbf.endurance.pe_cycles={pe}",
                f"training.grad_accumulation={ga}",
            ]
            for bw, pe, ga in (
                ("25 GB/s", 1000, 1),
                ("200 GB/s", 100000, 1),
                ("25 GB/s", 100000, 32),
                ("100 GB/s", 3000, 8),
            )
        ],
    ),
}


@dataclass(frozen=True)
class Case:
    name: str
    scenario: Path
    overrides: tuple[str, ...] = ()


def golden_cases() -> list[Case]:
    cases = [Case(p.stem, p) for p in sorted(SCENARIOS.glob("*.yaml"))]
    cases += [
        Case(f"published-{p.stem}", p)
        for p in sorted((SCENARIOS / "published").glob("*.yaml"))
        if p.name != "references.yaml"
    ]
    for sweep, (base, points) in SWEEP_SAMPLES.items():
        for i, overrides in enumerate(points):
            cases.append(Case(f"{sweep}-{i}", SCENARIOS / base, tuple(overrides)))
    return cases


def run_json(case: Case, out: Path) -> tuple[int, str]:
    """`tiersim run SCENARIO --format json --out OUT [--set ...]` in this process: (exit code,
    what it printed)."""
    from tiersim.cli import main

    argv = ["run", str(case.scenario), "--format", "json", "--out", str(out)]
    for override in case.overrides:
        argv += ["--set", override]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    return code, buffer.getvalue()


def report_of(case: Case) -> dict[str, Any]:
    """The case's report.json as `tiersim run --format json` prints it, volatile fields out."""
    with tempfile.TemporaryDirectory() as out:
        return report_from(case, *run_json(case, Path(out)))


def report_from(case: Case, code: int, printed: str) -> dict[str, Any]:
    """The report `run_json` printed, volatile fields out."""
    if code not in (0, None):
        raise RuntimeError(f"{case.name}: tiersim run exited {code}")
    report = json.loads(printed)
    for path in VOLATILE:
        node = report
        for key in path[:-1]:
            node = node.get(key, {})
        node.pop(path[-1], None)
    return report
