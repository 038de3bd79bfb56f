"""Capture the golden messages: what tiersim says of each representative bad input
(tests/message_cases.py), one file per group under tests/golden/messages/.

tests/test_message_goldens.py compares them word for word. Re-run it when a message is
deliberately reworded, and say which in the commit message; the other tests check a
problem's code and key path only.

    PYTHONPATH=$PWD .venv/bin/python tests/golden/capture_messages.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from message_cases import GOLDEN, groups, run, section  # noqa: E402


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for group, cases in groups().items():
        parts = []
        for case in cases:
            with tempfile.TemporaryDirectory() as folder:
                _, stderr = run(case, Path(folder))
            parts.append(section(case, stderr))
        path = GOLDEN / f"{group}.txt"
        path.write_text("\n".join(parts))
        print(f"wrote {path.relative_to(ROOT)} ({len(cases)} messages)")


if __name__ == "__main__":
    main()
