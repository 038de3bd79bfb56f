"""A Megatron-LM argument list out of a launch script: the `--flag value ...` pairs, with the
script's own `NAME=value` assignments substituted for `$NAME`, `${NAME}` and `${NAME:-x}`.

Not a shell: no command runs and no condition is evaluated, so the flags of every branch of an
`if` are read (a note says so where there is an `if`); a value that is not known (a positional
argument, a command substitution) stays as written, and a flag whose value it is says so when
it is mapped.
"""

from __future__ import annotations

import re
import shlex

from tiersim.core.records import record
from tiersim.frameworks.values import ValueProblem

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
MAX_TOKENS = 100_000


@record
class Flag:
    name: str  # without the leading dashes
    values: tuple[str, ...]
    line: int


def _expand(token: str, names: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in names:
            return names[name]
        default = m.group(2)
        return default.strip("\"'") if default is not None else m.group(0)

    return _VAR.sub(one, token)


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line): backslash continuations joined, and the lines of a quoted
    string that spans several (`GPT_ARGS="` ... `"`, Megatron-LM's older examples' way) joined
    with spaces, as the shell word-splits the variable where it is used unquoted."""
    out, pending, start, quote = [], "", 1, None
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        quote = _open_quote(line, quote)
        if quote is not None:
            pending += line + " "
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _open_quote(line: str, quote: str | None) -> str | None:
    """The quote still open at the end of `line`, given the one open at its start (None: none):
    one pass, so a file of any size is read in linear time."""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char == "#" and (i == 0 or line[i - 1].isspace()):
            return None  # a comment: the rest of the line
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote


def _tokens(line: str, number: int, source: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as exc:  # an unclosed quote
        raise ValueProblem(f"line {number}", f"cannot split into arguments: {exc}") from None


def parse_args(text: str, source: str) -> tuple[list[Flag], bool]:
    """The flags in `text`, in order, and whether it has a condition (`if`)."""
    names: dict[str, str] = {}
    flags: list[Flag] = []
    branches = False
    count = 0
    for number, line in _lines(text):
        tokens = _tokens(line, number, source)
        count += len(tokens)
        if count > MAX_TOKENS:
            raise ValueProblem(f"line {number}", f"more than {MAX_TOKENS:,} words to read")
        if tokens and tokens[0] in ("if", "elif", "case"):
            branches = True
        words = tokens[1:] if tokens[:1] == ["export"] else tokens
        if len(words) == 1 and (m := _ASSIGN.match(words[0])) and not m.group(2).startswith("("):
            names[m.group(1)] = _expand(m.group(2), names)
            continue
        _flags(tokens, names, number, flags)
    return flags, branches


def _flags(tokens: list[str], names: dict[str, str], number: int, out: list[Flag]) -> None:
    words: list[str] = []
    for token in tokens:
        expanded = _expand(token, names)
        # a quoted "--fp8-format hybrid" inside an array is two words to the program
        words += expanded.split() if expanded.lstrip().startswith("--") else [expanded]
    current: tuple[str, list[str]] | None = None
    for word in words:
        if word.startswith("--") and len(word) > 2 and word[2] != "-":
            if current:
                out.append(Flag(current[0], tuple(current[1]), number))
            name, eq, value = word[2:].partition("=")
            current = (name, [value] if eq else [])
        elif current is not None and word.endswith(".py"):  # the program: no flag's value
            out.append(Flag(current[0], tuple(current[1]), number))
            current = None
        elif current is not None and word not in (")", "(", "\\"):
            if word.startswith("-") and not _number(word):
                out.append(Flag(current[0], tuple(current[1]), number))
                current = None
            else:
                current[1].append(word)
    if current:
        out.append(Flag(current[0], tuple(current[1]), number))


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
