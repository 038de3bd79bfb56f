"""A problem line as the tests read it: its code and key path, the parts that stay when a
message is reworded (tiersim.core.problem_codes). The words themselves are checked in a few
golden files (tests/golden/messages/, tests/test_message_goldens.py).

    said(line, source) -> Said(path, code, message)

`line` is one line tiersim printed, `SOURCE: PATH: MESSAGE (line N) [CODE]`, where PATH and
the line number are absent for a problem of the whole file or option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tiersim.core.problem_codes import CODES

_TAIL = re.compile(r"^(?P<body>.*?)(?: \(line \d+\))? \[(?P<code>[EW]-[A-Z]+(?:-[A-Z]+)*)\]$")
# a key path (dotted, list items in brackets), a --set override, or an option
_PATH = re.compile(r"^(?:--set \S+|--?[\w-]+|[\w.\-\[\]/'\"]+)$")


@dataclass(frozen=True)
class Said:
    path: str
    code: str
    message: str

    @property
    def coded(self) -> tuple[str, str]:
        """(code, key path): what a test checks."""
        return self.code, self.path


def said(line: str, source: object) -> Said:
    """The problem `line` says of `source` (which it must begin with; a path or text)."""
    source = str(source)
    assert line.startswith(f"{source}: "), line
    match = _TAIL.match(line[len(source) + 2 :])
    assert match, f"no problem code at the end of: {line}"
    code, body = match["code"], match["body"]
    assert code in CODES, code
    head, sep, rest = body.partition(": ")
    if sep and _PATH.match(head):
        return Said(head, code, rest)
    return Said("", code, body)


def coded(lines: list[str], source: object) -> list[tuple[str, str]]:
    """(code, key path) of each line."""
    return [said(line, source).coded for line in lines]


_CODE = re.compile(r" \[[EW]-[A-Z]+(?:-[A-Z]+)*\]$", re.MULTILINE)


def bare(text: str) -> str:
    """`text` (what tiersim printed) with each problem line's code taken off, for a test of
    what comes before it (the line number, the points a sweep's problem has)."""
    return _CODE.sub("", text)
