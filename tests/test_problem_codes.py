"""Every problem tiersim can report has a stable code (tiersim.core.problem_codes): each
`Problem(...)` in the package names one from the table (or keeps the one of the problem it
rewords), every code in the table is used, and a rendered problem ends with its code even
when its text is cut."""

from __future__ import annotations

import ast
from pathlib import Path

from tiersim.core.errors import PROBLEM_CHARS, Problem
from tiersim.core.problem_codes import CODES, reference_page

PACKAGE = Path(__file__).resolve().parent.parent / "tiersim"


def _problem_calls(root: Path) -> list[tuple[str, ast.Call]]:
    calls = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Problem":
                calls.append((f"{path.relative_to(root.parent)}:{node.lineno}", node))
    return calls


def _code_given(call: ast.Call) -> ast.expr | None:
    given = [k.value for k in call.keywords if k.arg == "code"]
    return given[0] if given else (call.args[2] if len(call.args) > 2 else None)


def test_every_problem_made_names_a_code_from_the_table():
    calls = _problem_calls(PACKAGE)
    assert len(calls) > 200  # the walk found the package's problems (250 when written)
    unnamed, unknown = [], []
    for where, call in calls:
        code = _code_given(call)
        if code is None:
            unnamed.append(where)
        elif isinstance(code, ast.Constant) and code.value not in CODES:
            unknown.append(f"{where}: {code.value}")
        elif not isinstance(code, ast.Constant | ast.Attribute | ast.Subscript):
            unknown.append(f"{where}: {ast.unparse(code)}")  # p.code, a reworded problem's,
            # or codes[path], pydantic's errors' (config/messages.py): computed, not made up
    assert unnamed == []
    assert unknown == []


def test_every_code_in_the_table_is_used():
    text = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "problem_codes.py")
    assert [code for code in CODES if f'"{code}"' not in text and f"'{code}'" not in text] == []


def test_a_rendered_problem_ends_with_its_code_even_when_cut():
    p = Problem("training.seq_len", "input should be greater than 0 (got -3)", "E-RANGE")
    assert p.render("s.yaml") == (
        "s.yaml: training.seq_len: input should be greater than 0 (got -3) [E-RANGE]"
    )
    assert p.said("s.yaml") == "s.yaml: training.seq_len: input should be greater than 0 (got -3)"
    long = Problem("name", "x" * 3 * PROBLEM_CHARS, "E-NAME").render("s.yaml")
    assert long.endswith("... [E-NAME]")
    assert len(long) == PROBLEM_CHARS  # the code within the bound on a line
    reworded = p.reworded("said otherwise", "grid.training.seq_len")
    assert (reworded.path, reworded.message, reworded.code) == (
        "grid.training.seq_len",
        "said otherwise",
        "E-RANGE",
    )


def test_the_codes_page_lists_every_code():
    page = reference_page()
    # one table row per code: 2 header rows and the codes
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + len(CODES)
    assert "| `E-KEY-UNKNOWN` | a key the section does not have" in page
