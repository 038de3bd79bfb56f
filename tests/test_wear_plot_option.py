"""`tiersim wear --break-even --plot FILE`: a --plot that cannot be honoured is refused before
the ~30 simulations of --break-even, not after them (which also lost their tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiersim.api

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "llama2-7b-hbf-optimizer.yaml"


@pytest.fixture
def no_simulation(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("simulated before --plot was checked")

    monkeypatch.setattr(tiersim.api, "wear", refuse)


def test_a_folder_as_plot_is_refused_before_simulating(cli, tmp_path, no_simulation):
    code, out, err = cli("wear", SCENARIO, "--break-even", "--plot", tmp_path)
    assert code == 2 and out == ""
    assert err == f"--plot: {tmp_path}: is a folder (expected a file path) [E-RESULTS]\n"


def test_plot_without_break_even_is_refused_before_simulating(cli, tmp_path, no_simulation):
    code, _, err = cli("wear", SCENARIO, "--plot", tmp_path / "x.png")
    assert code == 2 and "expected --break-even beside it" in err


def test_a_plot_under_a_file_is_refused_before_simulating(cli, tmp_path, no_simulation):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("a file, not a folder")
    code, _, err = cli("wear", SCENARIO, "--break-even", "--plot", a_file / "x.png")
    assert code == 2
    assert err == (
        f"--plot: {a_file / 'x.png'}: its folder {a_file} is not a folder (expected a file "
        "path in an existing folder) [E-RESULTS]\n"
    )


def test_a_plot_not_named_png_is_refused_before_simulating(cli, tmp_path, no_simulation):
    code, _, err = cli("wear", SCENARIO, "--break-even", "--plot", tmp_path / "ranges.svg")
    assert code == 2
    assert err == (
        f"--plot: {tmp_path / 'ranges.svg'}: the picture is a PNG (expected a file name "
        "ending .png, e.g. ranges.png) [E-RESULTS]\n"
    )


def test_the_help_says_the_folder_must_exist_as_it_must(cli, tmp_path, no_simulation, capsys):
    """--help said "its folder made", but a missing folder is refused (none is made)."""
    with pytest.raises(SystemExit):
        cli("wear", "--help")
    said = " ".join(capsys.readouterr().out.split())
    assert "its folder made" not in said
    assert "in a folder that exists (none is made" in said
    code, _, err = cli("wear", SCENARIO, "--break-even", "--plot", tmp_path / "no" / "x.png")
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "no").exists()
