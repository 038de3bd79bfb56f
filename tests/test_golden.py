"""Every shipped scenario and sampled sweep point gives the report captured in tests/golden/.

The reports were captured by tests/golden/capture.py before the package was restructured
(issue 15); a restructuring must leave every figure where it was (1e-12 relative). A
deliberate change of results recaptures them, and its commit says which and why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from golden_cases import golden_cases, report_from

GOLDEN = Path(__file__).resolve().parent / "golden" / "reports"
REL = 1e-12


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Every field where `got` differs from `want`: numbers beyond REL, anything else unequal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{path}.{k}: unexpected" for k in got.keys() - want.keys()]
        for key in want.keys() & got.keys():
            out += differences(want[key], got[key], f"{path}.{key}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(got)} items (expected {len(want)})"]
        return [
            d
            for i, (w, g) in enumerate(zip(want, got, strict=True))
            for d in differences(w, g, f"{path}[{i}]")
        ]
    if isinstance(want, bool) or isinstance(got, bool):
        same = type(want) is type(got) and want == got
        return [] if same else [f"{path}: {got!r} (expected {want!r})"]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers):
        if not math.isclose(want, got, rel_tol=REL, abs_tol=1e-300):
            return [f"{path}: {got!r} (expected {want!r})"]
        return []
    return [] if want == got else [f"{path}: {got!r} (expected {want!r})"]


def test_differences_finds_a_moved_figure():
    assert differences({"a": {"b": 1.0}}, {"a": {"b": 1.0 + 1e-9}}) == [
        ".a.b: 1.000000001 (expected 1.0)"
    ]
    assert differences({"a": [1, 2]}, {"a": [1]}) == [".a: 1 items (expected 2)"]
    assert differences({"a": True}, {"a": 1}) == [".a: 1 (expected True)"]
    assert differences({"a": 1.0}, {"a": 1.0}) == []


@pytest.mark.parametrize("case", golden_cases(), ids=lambda c: c.name)
def test_report_matches_golden(case, shipped_run):
    want = json.loads((GOLDEN / f"{case.name}.json").read_text())
    code, printed, _ = shipped_run(case)  # report_of's run, shared with test_run_cli
    got = json.loads(json.dumps(report_from(case, code, printed)))  # as the file was written
    assert differences(want, got) == []


def test_every_case_has_a_golden_report():
    names = {c.name for c in golden_cases()}
    stored = {p.stem for p in GOLDEN.glob("*.json")}
    assert names == stored
