"""docs/nemo-memory.md's table of apex's cool-down peaks quotes what `tiersim run` prints now
(its `now` column, read from the golden reports, tests/test_golden.py): its `after` column is
that change alone, before Megatron's vocabulary padding and apex's whole buckets moved them, and
was the only figure a reader could take for `tiersim run`'s."""

from __future__ import annotations

from docs_text import page
from test_doc_nemo_figures import _report

RUNS = (
    "nemo2407-gpt3-175b-512gpus",
    "nemo2407-gpt3-175b-128gpus",
    "nemo2407-llama2-13b-16gpus",
    "nemo2407-llama2-70b-64gpus",
    "nemo2407-llama3-8b-8gpus",
    "nemo2407-llama2-7b-8gpus",
)


def test_apex_cool_down_table_now_column_is_todays():
    text = page("nemo-memory")
    assert "| run | before | after | now | why |" in text
    for run in RUNS:
        (cells,) = [
            [c.strip() for c in ln.strip("|").split("|")]
            for ln in text.splitlines()
            if ln.startswith(f"| {run} |") and ln.count("|") == 6
        ]
        peak = _report(run)["memory_timeline"]["peak_total_bytes"]
        assert cells[3] == f"{peak / 1e9:.2f} GB", run
