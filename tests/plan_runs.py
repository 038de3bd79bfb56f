"""A `tiersim plan` run in this process on two workers, its JSON report: the runner the plan
tests that compare a pruned search with an exhaustive one share."""

from __future__ import annotations

import contextlib
import io
import json

from tiersim.cli import main


def plan_json(path, *sets: str, top: int = 3) -> dict:
    """`tiersim plan PATH --format json --workers 2 --top TOP SETS...`'s report (exit 0
    asserted, its stderr in the message otherwise)."""
    out, err = io.StringIO(), io.StringIO()
    args = ["plan", str(path), "--format", "json", "--workers", "2", "--top", str(top), *sets]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())
