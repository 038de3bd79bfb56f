"""The figures docs/kernel-workspace.md's "Every other stack" section quotes are what tiersim
gives now: each run's device peak and workspace, read from the golden reports (every shipped
scenario's report, tests/test_golden.py), so a change that moves them leaves no stale page."""

from __future__ import annotations

import json

import pytest
from docs_text import ROOT, page

GOLDEN = ROOT / "tests" / "golden" / "reports"
SECTION = "## Every other stack: PyTorch's workspaces"


def _section() -> str:
    return page("kernel-workspace").split(SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("golden", "name", "workspace"),
    [
        ("mixtral-8x7b-ep-dgx-h100", "mixtral-8x7b-ep-dgx-h100", 67_108_864),
        ("published-nemo2407-llama3-70b-64gpus", "nemo2407-llama3-70b-64gpus", 167_772_160),
        ("published-narayanan2021-1.7b", "narayanan2021-1.7b", 17_039_360),
    ],
)
def test_the_quoted_peaks_are_todays(golden, name, workspace):
    report = json.loads((GOLDEN / f"{golden}.json").read_text())
    assert report["inventory"]["per_gpu"]["workspace"] == workspace
    now = f"{report['tiers']['hbm']['peak_bytes'] / 1e9:.2f} GB"
    assert f"{name} " in _section() and f"-> {now}" in _section().split(f"{name} ", 1)[1][:40]


def test_the_fall_is_the_former_gib_less_the_workspace():
    """1,073,741,824 B less each stack's workspace, as the section says."""
    text = " ".join(_section().split())
    for workspace, fall in ((67_108_864, 1_006_632_960), (167_772_160, 905_969_664)):
        assert 2**30 - workspace == fall and f"{fall:,} B" in text
    assert 2**30 - 17_039_360 == 1_056_702_464 and "1,056,702,464 B" in text
