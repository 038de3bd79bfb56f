"""Which peak MFU is against, said where it matters: under training.fp8 the linears run in FP8,
above the bf16 peak MFU divides by (docs/fp8.md), so `run`'s headline and `compare`'s MFU row
say so; a run without FP8 keeps its headline as it was."""

import json

from conftest import ROOT, SCENARIOS

from tiersim.api import compare, load
from tiersim.report.compare import compare_tables
from tiersim.report.text import step_tables
from tiersim.report.utilization import mfu_peak_note

NEMO = SCENARIOS / "published" / "nemo2407-llama2-7b-8gpus.yaml"  # training.fp8: delayed
GOLDEN = ROOT / "tests" / "golden" / "reports"
NOTE = "of the bf16 peak; its FP8 linears run above it"


def _golden(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def test_fp8_headline_names_the_bf16_peak():
    report = _golden("published-nemo2407-llama2-7b-8gpus")
    head = step_tables(report, mfu_peak=mfu_peak_note(load(NEMO).scenario)).splitlines()[0]
    # the golden's MFU, 0.8856 (compare's 88.56 %), to one decimal as the headline gives it
    assert f"(MFU {100 * report['step']['mfu']:.1f} % {NOTE})" in head
    assert "(MFU 88.6 % of the bf16 peak" in head


def test_no_fp8_headline_unchanged():
    loaded = load(SCENARIOS / "default.yaml")  # no training.fp8
    assert mfu_peak_note(loaded.scenario) is None
    head = step_tables(_golden("default"), mfu_peak=None).splitlines()[0]
    assert "of the bf16 peak" not in head


def test_compare_mfu_row_names_the_peak():
    a = load(NEMO)
    b = load(NEMO, ["training.fp8=null"])  # B without FP8: only A's note applies
    rep_a = _golden("published-nemo2407-llama2-7b-8gpus")
    rep_b = json.loads(json.dumps(rep_a))
    rep_b["step"]["mfu"] = rep_a["step"]["mfu"] / 2  # a moved MFU row to annotate
    result = compare(a, b, rep_a, rep_b)
    row = next(r for r in result["outputs"] if r["path"] == "step.mfu")
    assert row["of_peak"] == f"A: {NOTE}"
    both = compare(a, a, rep_a, rep_b)
    assert next(r for r in both["outputs"] if r["path"] == "step.mfu")["of_peak"] == NOTE
    assert f"step.mfu ({NOTE})" in compare_tables(both, "a", "b")
