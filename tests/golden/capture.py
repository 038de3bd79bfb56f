"""Capture the golden reports: every shipped scenario and a sample of each shipped sweep.

Run once, before a behaviour-preserving change (the redesign of issue 15), and commit the
output; tests/test_golden.py then compares every report field by field. Re-run it only for a
deliberate change of results, and say which in the commit message.

    .venv/bin/python tests/golden/capture.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from golden_cases import golden_cases, report_of  # noqa: E402

OUT = Path(__file__).resolve().parent / "reports"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for case in golden_cases():
        report = report_of(case)
        path = OUT / f"{case.name}.json"
        path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        print(path.name, report["step"]["time_s"])


if __name__ == "__main__":
    main()
