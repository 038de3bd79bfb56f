"""Errors a user can cause, kept apart from our own bugs (which stay exceptions with tracebacks)."""

from __future__ import annotations

import datetime
import reprlib

from tiersim.core.records import record

PROBLEM_CHARS = 2000


@record
class Problem:
    """One thing wrong with an input file, at a dotted key path, of a kind its `code` names
    (tiersim.core.problem_codes: stable, while the message's words may change)."""

    path: str
    message: str
    code: str

    def render(self, source: str) -> str:
        """One line: where (the source, the key path), what, and the code."""
        tail = f" [{self.code}]"
        return self.said(source, PROBLEM_CHARS - len(tail)) + tail

    def said(self, source: str, limit: int = PROBLEM_CHARS) -> str:
        """`render`'s line without its code (a problem quoted inside another's message)."""
        where = f"{source}: {self.path}" if self.path else source
        text = one_line(f"{where}: {self.message}")
        # a last guard: a value quoted without shown() (a tier name of 1 MB) stays one line
        return text if len(text) <= limit else f"{text[: limit - 3]}..."

    def reworded(self, message: str, path: str | None = None) -> Problem:
        """The same problem (its code kept) said in `message`, at `path` where given."""
        return Problem(self.path if path is None else path, message, self.code)


def one_line(text: str) -> str:
    """`text` with every line break and control character escaped ('\\n', '\\x1e'): a
    problem is one line, whatever characters a key or a file name holds."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class InputError(Exception):
    """Invalid input (CLI exit code 2). Holds every problem found, not just the first."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(p.render(self.source) for p in self.problems)


class CodedError(ValueError):
    """A validator's refusal of one value, with the problem code it is reported under
    (tiersim.config.messages reads it; a plain ValueError is reported as E-VALUE)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class InfeasibleError(Exception):
    """A scenario that is valid but cannot run at all (CLI exit code 3); the message says why."""


class BugFound(Exception):
    """A check of tiersim's own found a result it must never give (a utilisation above 1,
    bytes not conserved): a bug in tiersim, not the user's mistake (CLI exit code 70,
    EX_SOFTWARE, asking for a report). Nothing it would have written is written."""


BUG_REPORT = "a bug in tiersim; please report it with the scenario and the command"


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 3300:  # ~1,000 digits; repr() refuses 4,300 (int_max_str_digits)
            return f"<an integer of about {int(x.bit_length() * 0.30103)} digits>"
        return super().repr_int(x, level)

    def repr_date(self, x: datetime.date, level: int) -> str:
        # a date as the file wrote it (YAML's 2026-12-07, TOML's 1979-05-27T07:32:00Z), not
        # Python's datetime.date(2026, 12, 7)
        return x.isoformat()

    repr_datetime = repr_time = repr_date

    def repr_str(self, x: str, level: int) -> str:
        # a long path keeps its file name whole (reprlib's middle cut could drop it, and the
        # name is what tells the user which file is meant); the folders give way instead
        name = x.rsplit("/", 1)[-1]
        if len(x) <= self.maxstring or "/" not in x or len(name) > 2 * self.maxstring:
            return super().repr_str(x, level)
        head = x[: max(1, self.maxstring - len(name) - 4)]
        return repr(f"{head.rstrip('/')}/.../{name}")


_SHOWN = _Shown()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlong = 40
_SHOWN.maxlevel = 2
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 4
SHOWN_CHARS = 120


def shown_yaml(value: object) -> str:
    """`shown`, but true, false and null as YAML writes them (a scenario's own spelling)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return shown(value)


def shown(value: object) -> str:
    """`repr(value)`, shortened: a message quotes what the user gave without growing with it
    (a YAML alias bomb's value, a 5,000-digit number); reprlib looks at the first few items of
    a collection only, so the work is bounded too."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
