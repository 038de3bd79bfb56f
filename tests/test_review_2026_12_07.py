"""Findings of the 2026-12-07 new user's review (docs/review-2026-12-07.md), one test each."""

from __future__ import annotations

import pytest
import yaml

LLAMA_ZERO3 = """\
name: ds3
model: {preset: llama-2-7b}
training: {micro_batch_size: 1, grad_accumulation: 1, seq_len: 1024, framework: deepspeed}
parallel: {data: 8, zero_stage: 3}
hardware: {preset: dgx-h100}
"""


@pytest.mark.parametrize("key", ["stage3_prefetch_bucket_size", "stage3_max_live_parameters"])
def test_a_zero_stage3_size_is_written_back_not_a_traceback(cli, tmp_path, key):
    """`training.deepspeed.<key>: 0` (DeepSpeed's `ge=0`: no prefetch) validated, simulated,
    then ended in a traceback writing results/<name>/scenario.yaml: the document wrote the 0
    under training.offload's older name, whose count starts at 1. The 0 stays under its own
    key, and the document written runs again."""
    path = tmp_path / "ds3.yaml"
    path.write_text(LLAMA_ZERO3)
    out = tmp_path / "out"
    code, _, err = cli("run", path, "--set", f"training.deepspeed.{key}=0", "--out", out)
    assert code == 0, err
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["training"]["deepspeed"][key] == 0
    code, _, err = cli("validate", out / "scenario.yaml")
    assert code == 0, err
