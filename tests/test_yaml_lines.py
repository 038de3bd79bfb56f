"""Problems with a scenario file end with the line their key is written on (`tiersim run`,
`validate`, `inventory` alike); a problem from `--set` does not; a hostile file costs no more."""

from __future__ import annotations

import contextlib
import io

from tiersim.cli import main
from tiersim.config.yamllines import key_lines

BAD = """name: x
model: {preset: gpt2}
training:
  micro_batch_sise: 2
  seq_len: -5
hardware:
  tiers:
    hbm: {bandwidth: 50 GB}
"""


def _err(*args: object) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, err.getvalue()


def test_each_problem_names_the_line_of_its_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    for command in ("run", "validate", "inventory"):
        code, err = _err(command, path)
        assert code == 2, err
        lines = err.strip().splitlines()
        # lines 4, 5 and 8 of BAD, counted from 1
        assert any(x.startswith(f"{path}: training.micro_batch_sise: ") for x in lines)
        assert [x.rsplit(" (line ", 1)[1] for x in sorted(lines)] == ["8)", "4)", "5)"]


def test_a_problem_from_set_has_no_line(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\ntraining:\n  seq_len: 512\n")
    code, err = _err("validate", path, "--set", "training.seq_len=0")
    assert code == 2 and "(from --set" in err and "(line " not in err


def test_key_lines_do_not_follow_aliases():
    # nine levels of nine aliases ("billion laughs"): each node is visited once
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
    )
    lines = key_lines(text)
    assert lines["a9"] == 10 and lines["a0.8"] == 1
    assert len(lines) < 200  # not 9 ** 9
