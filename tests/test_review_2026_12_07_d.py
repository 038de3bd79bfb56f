"""Findings of the fourth 2026-12-07 review, the HBF buyer's (docs/review-2026-12-07-d.md),
one test each."""

from __future__ import annotations

import json

import pytest

from tiersim.cli import main

GPT2 = "name: g\nmodel: {preset: gpt2}\ntraining: {seq_len: 256}\n"


def test_a_delayed_update_on_the_gpu_is_not_said_to_run_on_the_cpu(tmp_path, capsys):
    """`training.optimizer_step: delayed` (ZeRO-Offload's DPU) with the optimizer on the GPU:
    the head line said "while the CPU updates", and the step is the synchronous one (the GPU's
    stream waits for the update); now it says the update is on the GPU."""
    path = tmp_path / "g.yaml"
    path.write_text(GPT2)
    runs = {}
    for mode in ("synchronous", "delayed"):
        sets = ["--set", f"training.optimizer_step={mode}", "--out", str(tmp_path / mode)]
        assert main(["run", str(path), *sets]) == 0
        runs[mode] = capsys.readouterr().out.splitlines()
    assert runs["delayed"][1] == (
        "optimizer step delayed (DPU): each step runs on the weights of the step before last, "
        "but the update is on the GPU, whose stream waits for it as if synchronous "
        "(training.optimizer_step)"
    )
    step = {m: json.loads((tmp_path / m / "report.json").read_text())["step"] for m in runs}
    assert step["delayed"]["optimizer_on"] == "gpu"
    assert step["delayed"]["time_s"] == pytest.approx(step["synchronous"]["time_s"], rel=1e-12)
