"""`training.global_batch_size` (grad_accumulation derived and checked) and the token targets
`training.tokens_per_day` / `training.total_tokens` (the report's `target` section)."""

from __future__ import annotations

import json

import pytest
import yaml

import tiersim

BASE = """name: gb
model: {preset: gpt2}
training: {micro_batch_size: 2, global_batch_size: 64, seq_len: 1024}
parallel: {data: 4}
hardware: {preset: dgx-h100}
"""


def _file(tmp_path, text=BASE):
    path = tmp_path / "gb.yaml"
    path.write_text(text)
    return path


def test_grad_accumulation_is_derived_from_the_global_batch(tmp_path):
    s = tiersim.load_scenario(_file(tmp_path)).scenario
    assert s.training.grad_accumulation == 64 // (2 * 4)  # global / (micro x data) = 8
    # the same global batch at micro-batch 4: half the accumulation
    s = tiersim.load_scenario(_file(tmp_path), ["training.micro_batch_size=4"]).scenario
    assert s.training.grad_accumulation == 64 // (4 * 4)


def test_a_global_batch_that_does_not_divide_says_what_would(cli, tmp_path):
    code, _, err = cli("validate", _file(tmp_path), "--set", "parallel.data=3")
    assert code == 2
    # 64 over micro 2 x data 3 = 6: the multiples of 6 around it are 60 and 66
    assert "training.global_batch_size: 64 sequences are not" in err
    assert "expected a multiple of 6, e.g. 60 or 66" in err
    assert "dividing 64: 1, 2, 4, 8, 16, 32, 64" in err


def test_an_accumulation_that_disagrees_is_refused(cli, tmp_path):
    code, _, err = cli("validate", _file(tmp_path), "--set", "training.grad_accumulation=3")
    assert code == 2
    assert "training.grad_accumulation: 3 disagrees with" in err and "= 8" in err
    # agreeing with it is fine
    code, _, err = cli("validate", _file(tmp_path), "--set", "training.grad_accumulation=8")
    assert code == 0, err


def test_the_written_scenario_keeps_the_global_batch_and_reruns_the_same(cli, tmp_path):
    code, out, err = cli("run", _file(tmp_path), "--format", "json", "--out", tmp_path / "r")
    assert code == 0, err
    written = yaml.safe_load((tmp_path / "r" / "scenario.yaml").read_text())
    assert written["training"]["global_batch_size"] == 64
    assert "grad_accumulation" not in written["training"]  # derived again on reading
    again = tiersim.load_scenario(tmp_path / "r" / "scenario.yaml").scenario
    assert again.training.grad_accumulation == 8
    # 64 sequences of 1024 tokens a step
    assert json.loads(out)["step"]["tokens_per_step"] == 64 * 1024


def test_token_targets_in_the_report(tmp_path):
    extra = ["training.tokens_per_day=2e10", "training.total_tokens=1e12"]
    report = tiersim.report_for(tiersim.load_scenario(_file(tmp_path), extra))
    target, step = report["target"], report["step"]
    per_day = step["tokens_per_s"] * 86_400  # no checkpoint modelled: every second trains
    assert target["tokens_per_day"] == pytest.approx(per_day)
    assert target["meets_tokens_per_day"] == (per_day >= 2e10)
    assert target["speedup_needed"] == pytest.approx(2e10 / per_day)
    # 1e12 tokens / 65,536 a step = 15,258,789.06...: 15,258,790 steps
    assert target["steps_for_total"] == 15_258_790
    assert target["days_for_total"] == pytest.approx(1e12 / per_day)
    # without a target, no section (reports of scenarios without one are unchanged)
    assert "target" not in tiersim.report_for(tiersim.load_scenario(_file(tmp_path)))


def test_goodput_counts_in_the_daily_tokens(tmp_path):
    extra = ["training.tokens_per_day=1e9", "checkpoint.every_steps=100", "failures.mtbf=3 h"]
    report = tiersim.report_for(tiersim.load_scenario(_file(tmp_path), extra))
    share = report["checkpoint"]["goodput"]
    assert 0 < share < 1
    expected = report["step"]["tokens_per_s"] * 86_400 * share
    assert report["target"]["tokens_per_day"] == pytest.approx(expected)
    assert report["target"]["after_checkpoints_and_failures"] is True
