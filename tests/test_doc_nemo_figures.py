"""The NeMo 24.07 rows the docs quote are what tiersim gives now: the step times and errors in
docs/h100-kernel-evidence.md's and docs/kernels.md's check-published tables, and the device
peaks in docs/memory.md's optimizer table. Read from the golden reports (what every shipped
scenario's report is, tests/test_golden.py) and the published times (references.yaml), so a
change that moves a figure and leaves a page stale fails here."""

from __future__ import annotations

import json

import yaml
from docs_text import ROOT, page

GOLDEN = ROOT / "tests" / "golden" / "reports"
PUBLISHED = ROOT / "scenarios" / "published"
RUNS = {  # the docs' names for the seven runs
    "GPT-3 175B, 128 GPUs": "nemo2407-gpt3-175b-128gpus",
    "GPT-3 175B, 512 GPUs": "nemo2407-gpt3-175b-512gpus",
    "Llama 2 7B, 8 GPUs": "nemo2407-llama2-7b-8gpus",
    "Llama 2 13B, 16 GPUs": "nemo2407-llama2-13b-16gpus",
    "Llama 2 70B, 64 GPUs": "nemo2407-llama2-70b-64gpus",
    "Llama 3 8B, 8 GPUs (CP 2)": "nemo2407-llama3-8b-8gpus",
    "Llama 3 70B, 64 GPUs (CP 2)": "nemo2407-llama3-70b-64gpus",
}


def _report(run: str) -> dict:
    return json.loads((GOLDEN / f"published-{run}.json").read_text())


def _now(run: str) -> tuple[float, float]:
    """(predicted step s, signed error %) against the published step."""
    refs = yaml.safe_load((PUBLISHED / "references.yaml").read_text())
    published = refs[f"{run}.yaml"]["iteration_time_s"]
    predicted = _report(run)["step"]["time_s"]
    return predicted, 100 * (predicted - published) / published


def _row(text: str, first_cell: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {first_cell} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_kernel_evidence_now_column_is_todays_check_published():
    text = page("h100-kernel-evidence").split("## check-published, NeMo 24.07 group", 1)[1]
    errors = []
    for run in RUNS.values():
        predicted, error = _now(run)
        now = _row(text, run.removeprefix("nemo2407-"))[4]
        assert now == f"{predicted:.4g} s, {error:+.1f} %", run
        errors.append(abs(error))
    mean_max = f"{sum(errors) / len(errors):.1f} % / {max(errors):.1f} %"
    assert _row(text, "mean / max")[4] == mean_max


def test_kernels_page_now_column_is_todays_check_published():
    text = page("kernels").split("## What the tables leave out, and the modern group", 1)[1]
    for label, run in RUNS.items():
        assert _row(text, label)[5] == f"{_now(run)[1]:+.1f} %", label


def test_memory_page_nemo_peaks_now_column_is_todays():
    text = page("memory")
    for run in RUNS.values():
        (cells,) = [
            [c.strip() for c in ln.strip("|").split("|")]
            for ln in text.splitlines()
            if ln.startswith(f"| {run}") and ln.count("|") == 6
        ]
        peak = _report(run)["memory_timeline"]["peak_total_bytes"]
        assert cells[3].split(" (")[0] == f"{peak / 1e9:.2f} GB", run


def test_validation_page_counts_every_published_run_and_quotes_the_modern_group():
    text = " ".join(page("validation").split())
    refs = yaml.safe_load((PUBLISHED / "references.yaml").read_text())
    assert f"`tiersim check-published`: {len(refs)} published runs" in text
    errors = [abs(_now(run)[1]) for run in RUNS.values()]
    worst = max(RUNS.values(), key=lambda run: abs(_now(run)[1]))
    assert worst == "nemo2407-llama3-8b-8gpus"  # the page names it
    quoted = f"mean {sum(errors) / len(errors):.1f} %, worst {max(errors):.1f} % (Llama 3 8B)"
    assert quoted in text


def test_nemo_as_shipped_now_column_is_todays_check_published():
    """The page quotes the command: its last column is what the command prints now."""
    text = page("nemo-as-shipped").split("## Per-run errors before and after", 1)[1]
    errors = []
    for run in RUNS.values():
        predicted, error = _now(run)
        assert _row(text, run)[-1] == f"{predicted:.4g} s, {error:+.1f} %", run
        errors.append(abs(error))
    group = f"mean {sum(errors) / len(errors):.1f} %, max {max(errors):.1f} %"
    assert _row(text, "group")[-1] == group
