"""Defects a new user met (the review of the 0.11 CLI): each test failed before its fix."""

from __future__ import annotations

from problem_lines import said

LLAMA = {"name": "x", "model": {"preset": "llama-2-7b"}}


def _deepspeed_pipeline(zero: int) -> dict:
    return {
        **LLAMA,
        "training": {"framework": "deepspeed", "grad_accumulation": 8},
        "parallel": {"data": 4, "pipeline": 2, "zero_stage": zero},
    }


def test_deepspeed_pipeline_refuses_zero_2_and_3(cli, write):
    """DeepSpeed's PipelineEngine asserts zero_optimization_stage() < ZeroStageEnum.gradients,
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    (deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__): no such run exists."""
    for zero in (2, 3):
        file = write(_deepspeed_pipeline(zero))
        code, out, err = cli("validate", file)
        assert code == 2, (out, err)
        assert "Traceback" not in err
        line = err.strip()
        assert said(line, file).coded == ("E-CONFLICT", "parallel.zero_stage")
        assert f"is {zero}" in line and "pipeline" in line


def test_deepspeed_pipeline_with_zero_1_and_other_frameworks_stay_valid(cli, write):
    assert cli("validate", write(_deepspeed_pipeline(1)))[0] == 0
    raw = _deepspeed_pipeline(3)
    raw["training"] = {"grad_accumulation": 8}  # no framework: tiersim's generic engine
    assert cli("validate", write(raw))[0] == 0
