"""`--set` on `tiersim plan` and `tiersim validate`: the plan searches the scenario as
overridden, says so, and every rerun line repeats the base overrides before the candidate's;
validate checks the overridden scenario and refuses --set on a sweep file."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

from conftest import SCENARIOS

from tiersim.cli import main

PLAN = "plan:\n  placement.optimizer: [hbm, dram]\n  placement.master: [hbm]\n"
BASE = "training.seq_len=2048"


def _cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _scenario(tmp: Path) -> Path:
    path = tmp / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    return path


def _step_s(path: Path, out: Path, *sets: str) -> float:
    args = [a for s in sets for a in ("--set", s)]
    code, text, err = _cli("run", path, "--format", "json", "--out", out, *args)
    assert code == 0, err
    return json.loads(text)["step"]["time_s"]


def test_plan_searches_the_overridden_scenario_and_reruns_with_it(tmp_path):
    path = _scenario(tmp_path)
    code, out, err = _cli("plan", path, "--format", "json", "--workers", "1", "--set", BASE)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["base_overrides"] == [BASE]
    assert plan["plans"], "both candidates fit the default machine"
    for entry in plan["plans"]:
        words = shlex.split(entry["rerun"])
        assert words[:3] == ["tiersim", "run", str(path)]
        sets = words[3:]
        # the base override first, then the candidate's own (a later --set wins)
        assert sets[:2] == ["--set", BASE]
        assert sets[2:] == [w for o in entry["overrides"] for w in ("--set", o)]
        rerun = _step_s(path, tmp_path / "rerun", *sets[1::2])
        assert rerun == entry["step_time_s"]
        # the base override took effect: without it the same candidate's step differs
        plain = _step_s(path, tmp_path / "plain", *entry["overrides"])
        assert plain != entry["step_time_s"]


def test_plan_text_names_the_base_overrides(tmp_path):
    path = _scenario(tmp_path)
    code, out, err = _cli("plan", path, "--workers", "1", "--set", BASE)
    assert code == 0, err
    assert f"(with --set {BASE})" in out.splitlines()[0]


def test_plan_bad_set_exits_2_naming_it(tmp_path):
    path = _scenario(tmp_path)
    code, _, err = _cli("plan", path, "--set", "training.seq_len=0")
    assert code == 2 and "training.seq_len" in err and "Traceback" not in err


def test_validate_checks_the_overridden_scenario(tmp_path):
    path = SCENARIOS / "default.yaml"
    assert _cli("validate", path, "--set", "training.micro_batch_size=2")[0] == 0
    code, _, err = _cli("validate", path, "--set", "training.micro_batch_size=0")
    assert code == 2 and "training.micro_batch_size" in err and "--set" in err


def test_validate_refuses_set_on_a_sweep_file():
    sweep = next((SCENARIOS / "sweeps").glob("*.yaml"))
    code, _, err = _cli("validate", sweep, "--set", BASE)
    assert code == 2 and f"--set {BASE}" in err and "scenario file" in err
