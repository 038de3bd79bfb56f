"""The one rulebook (tiersim/rulebook.py): `inventory`, `wear` and `compare` refuse a `plan:`
section `validate` refuses, with validate's words and code (docs/bad-input.md: they used to
run it, as they do not use it)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from conftest import SCENARIOS

from tiersim.cli import main

DEFAULT = (SCENARIOS / "default.yaml").read_text()
# default.yaml's lines, then `plan:` on the next and the key on the one after it
KEY_LINE = DEFAULT.count("\n") + 2
EMPTY = "plan.placement.optimizer: is an empty list (expected at least one value to consider)"
TWICE = (
    "plan.placement.optimizer: lists 'hbm' twice (items 0 and 1; expected each value once: "
    "remove the repeat or correct it to the value meant)"
)


def _cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _scenario(tmp: Path, values: str) -> Path:
    path = tmp / "s.yaml"
    path.write_text(DEFAULT + f"plan:\n  placement.optimizer: {values}\n")
    return path


@pytest.mark.parametrize(("values", "why"), [("[]", EMPTY), ("[hbm, hbm]", TWICE)])
def test_inventory_wear_compare_refuse_what_validate_refuses(tmp_path, values, why):
    path = _scenario(tmp_path, values)
    expected = f"{path}: {why} (line {KEY_LINE}) [E-PLAN]\n"
    for args in (
        ("validate", path),
        ("inventory", path),
        ("wear", path),
        ("compare", SCENARIOS / "default.yaml", path),
        ("compare", path, "--set", "training.seq_len=2048"),
    ):
        code, out, err = _cli(*args)
        assert (code, out, err) == (2, "", expected), args
