"""Muon under DeepSpeed ZeRO at DeepSpeed's default `zero_optimization.reduce_scatter: true` is
refused (exit 2, `training.deepspeed.reduce_scatter`), as DeepSpeed refuses it when the engine
is built (stage_1_and_2.py's assert at ZeRO-1/2, stage3.py's ValueError at ZeRO-3,
deepspeedai/DeepSpeed commits 02aa38c3 and 007cca6a), like DeepSpeed's pipeline engine's
refusal of ZeRO-2/3 (tests/test_review_fixes.py). With reduce_scatter false it is counted
(tests/test_deepspeed_muon.py); notes remain where DeepSpeed runs it otherwise than counted
(config/optimizer_notes.py)."""

from __future__ import annotations

import json

import pytest
from problem_lines import said

from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.emit import emit

ZERO2 = "scenarios/zero-offload-10b-dgx2.yaml"  # DeepSpeed ZeRO-2, Adam on the CPU
ZERO3 = "scenarios/zero-infinity-1t-dgx2.yaml"  # DeepSpeed ZeRO-3, state on NVMe
CODE = "[W-FRAMEWORK-LIMIT]"


def _validate(cli, path: str, *sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = cli("validate", path, *args)
    assert code == 0, err  # a note beside a valid scenario, never an error
    return err


@pytest.mark.parametrize(
    "path, stage, words",
    [
        (ZERO2, 1, 'asserts "ZeRO-1 with reduce_scatter=True is incompatible with Muon'),
        (ZERO2, 2, 'asserts "ZeRO-2 with reduce_scatter=True is incompatible with Muon'),
        (ZERO3, 3, 'raises ValueError("Muon and reduce scatter cannot be used together")'),
    ],
)
@pytest.mark.parametrize("compute", ["gpu", "cpu"])  # refused at init, wherever it steps
def test_muon_at_deepspeeds_default_reduce_scatter_is_refused(cli, path, stage, words, compute):
    sets = ("training.optimizer=muon", f"parallel.zero_stage={stage}")
    sets += (f"placement.optimizer_compute={compute}",)
    code, out, err = cli("validate", path, *[a for s in sets for a in ("--set", s)])
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if "reduce_scatter" in line]
    assert len(lines) == 1, err
    line = said(lines[0], path)
    assert line.coded == ("E-CONFLICT", "training.deepspeed.reduce_scatter")
    assert f"under ZeRO-{stage}" in line.message and words in line.message
    assert "expected training.deepspeed.reduce_scatter: false" in line.message


@pytest.mark.parametrize(
    "path, sets",
    [
        (ZERO2, ("training.optimizer=adam",)),  # not Muon
        (ZERO2, ("training.optimizer=muon", "training.framework=fsdp")),  # FSDP2: modelled
    ],
)
def test_nothing_said_outside_deepspeed_zero_muon(cli, path, sets):
    err = _validate(cli, path, *sets)
    # under FSDP2 the file's fp32 master beside 16-bit weights has a note of its own (review
    # 2026-12-08 b, config/optimizer_notes.py), not about Muon
    others = [x for x in err.splitlines() if "training.precision.master" not in x]
    assert CODE not in "\n".join(others) and "reduce_scatter" not in err


def test_with_reduce_scatter_false_notes_only_what_deepspeed_runs_otherwise(cli):
    # ZeRO-2 with the optimizer on the GPU: DeepSpeed runs it, tiersim counts it
    # (tests/test_deepspeed_muon.py): no note
    sets = ("training.optimizer=muon", "placement.optimizer_compute=gpu")
    err = _validate(cli, ZERO2, *sets, "training.deepspeed.reduce_scatter=false")
    assert CODE not in err
    # the optimizer on the CPU: at the source read DeepSpeed has no Muon path there
    err = _validate(
        cli, ZERO2, "training.optimizer=muon", "training.deepspeed.reduce_scatter=false"
    )
    assert CODE in err and "DeepSpeed has no Muon path there" in err
    assert "no momentum, no Newton-Schulz" in err


def test_zero3_muon_on_the_gpu_needs_the_momentum_kept_in_memory(cli):
    # stage3.py `_apply_distributed_muon_update`: neither swapped nor
    # save_muon_momentum_buffer_in_memory: ValueError
    sets = ("training.optimizer=muon", "training.deepspeed.reduce_scatter=false")
    gpu = ("placement.optimizer_compute=gpu", "placement.optimizer=hbm", "placement.master=hbm")
    err = _validate(cli, ZERO3, *sets, *gpu, "placement.gradients=hbm", "placement.weights=hbm")
    assert CODE in err and "save_muon_momentum_buffer_in_memory: true" in err


def _ds_json(tmp_path, zero: dict) -> object:
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "muon"},  # as DeepSpeed's tests/unit/ops/muon write it
        "zero_optimization": zero,
    }
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return path


def test_a_deepspeed_muon_config_imports_with_its_reduce_scatter(tmp_path):
    options = ImportOptions(name="back", overrides=("model.preset=gpt2",))
    path = _ds_json(tmp_path, {"stage": 3, "reduce_scatter": False})
    imported = import_configs([path], options)
    s = imported.loaded.scenario
    assert s.training.optimizer == "muon" and s.training.deepspeed.reduce_scatter is False
    # written back as read, with save_muon_momentum_buffer_in_memory: DeepSpeed's ZeRO-3
    # raises ValueError on the GPU without it, and tiersim counts the run with it
    zero = json.loads(emit(s, "deepspeed").text)["zero_optimization"]
    assert json.loads(emit(s, "deepspeed").text)["optimizer"] == {"type": "muon"}
    assert zero["reduce_scatter"] is False and zero["save_muon_momentum_buffer_in_memory"] is True


def test_a_deepspeed_muon_config_at_its_default_reduce_scatter_is_refused(cli, tmp_path):
    # DeepSpeed would refuse it when the engine is built: so does the import (exit 2)
    path = _ds_json(tmp_path, {"stage": 2})
    code, out, err = cli("import", path, "--set", "model.preset=gpt2", "--out", tmp_path / "s.yaml")
    assert code == 2, (out, err)
    assert "training.deepspeed.reduce_scatter" in err and "[E-CONFLICT]" in err
    assert "Traceback" not in err and not (tmp_path / "s.yaml").exists()


def test_deepspeed_without_zero_applies_no_muon_and_is_noted(cli):
    # engine.py 007cca6a builds muon_optimizer.MuonWithAuxAdam, whose step adds the Muon
    # group's gradient as it is: no momentum, no Newton-Schulz without a ZeRO optimizer
    sets = ("training.optimizer=muon", "parallel.zero_stage=0", "placement.optimizer_compute=gpu")
    err = _validate(cli, ZERO2, *sets, "placement.optimizer=hbm", "placement.master=hbm")
    assert CODE in err and "muon under DeepSpeed without ZeRO" in err
    assert "reduce_scatter: true" not in err  # not refused: DeepSpeed runs it, as SGD
