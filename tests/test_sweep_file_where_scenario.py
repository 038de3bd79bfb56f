"""A sweep file where a scenario is expected (a command's SCENARIO, a sweep's base:) is said in
one line, naming the file and what to do, not as a missing model and an unknown key a section."""

from __future__ import annotations

import pytest
import yaml
from test_sweep_spec import write_sweep


@pytest.mark.parametrize("command", ["run", "inventory", "wear", "plan"])
def test_a_sweep_file_given_to_a_scenario_command_says_so(tmp_path, cli, command):
    # with a name: (as docs/commands.md writes one), which is also a scenario's section
    path = write_sweep(tmp_path, {"name": "w", "grid": {"parallel.data": [1, 2]}})
    code, out, err = cli(command, path)
    assert code == 2 and out == ""
    assert err == (
        f"{path}: not a scenario but a sweep file (it has grid, zip or base): run it with "
        "`tiersim sweep`, or run the scenario its base: names [E-SWEEP]\n"
    )


def test_a_scenario_file_with_a_mistake_keeps_its_own_messages(tmp_path, cli):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"name": "s", "model": {"preset": "gpt2"}, "grid": 1}))
    code, _, err = cli("inventory", scenario)
    assert code == 2 and "grid: unknown key 'grid'" in err and "sweep file" not in err


def test_a_sweep_whose_base_is_a_sweep_file_is_refused_at_its_base(tmp_path, cli):
    inner = write_sweep(tmp_path, {"grid": {"parallel.data": [1, 2]}})
    outer = tmp_path / "outer.yaml"
    outer.write_text(yaml.safe_dump({"base": str(inner), "grid": {"parallel.data": [1, 2]}}))
    code, _, err = cli("sweep", outer, "--out", tmp_path / "out", "--no-plots")
    assert code == 2
    assert err == (
        f"{outer}: base: {inner} is a sweep file (it has grid, zip or base; expected a "
        "scenario file) (line 1) [E-SWEEP]\n"
    )
    assert not (tmp_path / "out").exists()
