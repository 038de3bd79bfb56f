"""`parallel.pipeline_engine_overhead` is a calibration a user makes of their own run (MT-NLG's
0.283 a fit to it), not a property of any framework (issue #39): the run's step breakdown and
check-published's table show what it adds as such."""

from __future__ import annotations

import yaml

from tiersim.cli import main


def _text(tmp_path, capsys, overhead: float) -> str:
    raw = {
        "name": "overhead",
        "model": {"preset": "gpt2"},
        "training": {"seq_len": 1024, "micro_batch_size": 1, "framework": "megatron"},
        "parallel": {"pipeline_engine_overhead": overhead},
        "hardware": {"preset": "dgx-a100"},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    return capsys.readouterr().out


def test_the_overhead_is_shown_as_a_calibration_not_a_frameworks(tmp_path, capsys):
    text = _text(tmp_path, capsys, 0.25)
    assert "calibrated overhead (pipeline_engine_overhead)" in text
    assert "framework overhead" not in text
    # without it (every framework's default), no such row
    assert "calibrated overhead" not in _text(tmp_path, capsys, 0.0)
