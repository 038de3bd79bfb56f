"""Count the test asserts that check a message's prose, and those that check a problem code.

    .venv/bin/python tests/golden/count_prose.py [--files N]

A prose assert is an `assert` whose condition holds a piece of English: a string literal
(or f-string) of three words or more, compared with (`in`, `not in`, `==`, `!=`) or passed
to `startswith` / `endswith` / `match` / `search`. Docstrings, and the message an assert
prints on failure (`assert x, "..."`), are not conditions and are not counted. A code assert
names a problem code (`E-...` / `W-...`, tiersim.core.problem_codes). A prose assert is on
an error message where the names it reads say so (err, stderr, exc, message, problem, note,
line, ...); the others check a report's or a table's words. Printed: asserts in all, prose
asserts, those on error messages, code asserts, and the files with the most prose asserts on
messages.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CODE = re.compile(r"\b[EW]-[A-Z]+(?:-[A-Z]+)*\b")
# names a message is read from: an error's text, stderr, a problem
MESSAGE_NAMES = re.compile(
    r"err|exc|error|message|msg|problem|raised|refus|why|^line$|^only$|note", re.IGNORECASE
)


def _texts(node: ast.AST) -> list[str]:
    """The literal text of the string constants and f-strings under `node`."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.JoinedStr):
            out.append(" ".join(v.value for v in sub.values if isinstance(v, ast.Constant)))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.append(sub.value)
    return out


def _is_prose(text: str) -> bool:
    return len(re.findall(r"[A-Za-z']+", text)) >= 3


COMPARING = (ast.In, ast.NotIn, ast.Eq, ast.NotEq)
MATCHING = ("startswith", "endswith", "match", "search", "fullmatch")


def _compares_text(test: ast.AST) -> bool:
    for sub in ast.walk(test):
        if isinstance(sub, ast.Compare) and any(isinstance(op, COMPARING) for op in sub.ops):
            texts = _texts(sub)
        elif isinstance(sub, ast.Call) and getattr(sub.func, "attr", None) in MATCHING:
            texts = [t for a in sub.args for t in _texts(a)]
        else:
            continue
        if any(_is_prose(t) for t in texts):
            return True
    return False


def _about_a_message(test: ast.AST) -> bool:
    """Whether the condition reads an error message: a name it uses says so (err, stderr,
    exc, excinfo, message, problem, note, a `line` of them, ...)."""
    names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)]
    return any(MESSAGE_NAMES.search(name) for name in names)


def count(root: Path = TESTS) -> tuple[int, int, int, int, dict[str, int]]:
    """Asserts, prose asserts, prose asserts on messages, code asserts, and each file's
    prose asserts on messages."""
    total = prose = messages = codes = 0
    per_file: dict[str, int] = {}
    for path in sorted(root.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Assert):
                continue
            total += 1
            if any(CODE.search(t) for t in _texts(node.test)):
                codes += 1
            elif _compares_text(node.test):
                prose += 1
                if _about_a_message(node.test):
                    messages += 1
                    name = str(path.relative_to(root))
                    per_file[name] = per_file.get(name, 0) + 1
    return total, prose, messages, codes, per_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=15, help="files listed (most first)")
    args = parser.parse_args()
    total, prose, messages, codes, per_file = count()
    print(f"asserts: {total}; prose asserts: {prose} ({prose / total:.1%}), of which on an error")
    print(f"message: {messages} ({messages / total:.1%}); asserts naming a problem code: {codes}")
    for name, n in sorted(per_file.items(), key=lambda kv: -kv[1])[: args.files]:
        print(f"{n:5d}  {name}")


if __name__ == "__main__":
    main()
