"""`tiersim sweep --help` says what the sweep does with a bad value: one wrong whatever the
other axes hold is refused before any point runs (it said every invalid point was recorded
and the sweep went on, which a user reads as 'the other points still run')."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS


def test_a_value_wrong_on_its_own_is_refused_as_the_help_says(cli, tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    # Llama 2 7B's 32 heads do not divide over 3 tensor-parallel ranks, whatever else is set
    sweep.write_text(f"base: {SCENARIOS / 'default.yaml'}\ngrid: {{parallel.tensor: [1, 3]}}\n")
    code, out, err = cli("sweep", sweep, "--out", tmp_path / "o", "--workers", "1", "--no-plots")
    assert code == 2 and out == ""
    assert "grid.parallel.tensor: value 3" in err and "[E-LAYOUT]" in err
    assert not (tmp_path / "o" / "results.csv").exists()  # no point ran
    with pytest.raises(SystemExit) as done:
        cli("sweep", "--help")
    assert done.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "A value wrong whatever the other axes hold is refused before any point runs" in said
    assert "a point invalid only in combination, or one that fails, is recorded" in said
