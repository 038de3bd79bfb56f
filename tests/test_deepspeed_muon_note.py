"""Muon under DeepSpeed ZeRO is noted, not silently counted: DeepSpeed refuses it at its
default `zero_optimization.reduce_scatter: true` (stage_1_and_2.py's assert at ZeRO-1/2,
stage3.py's ValueError at ZeRO-3, deepspeedai/DeepSpeed commits 02aa38c3 and 007cca6a) and,
with reduce_scatter false, all-reduces the gradients whole and updates whole matrices, none of
which tiersim counts (config/optimizer_notes.py)."""

from __future__ import annotations

import pytest

ZERO2 = "scenarios/zero-offload-10b-dgx2.yaml"  # DeepSpeed ZeRO-2, Adam on the CPU
ZERO3 = "scenarios/zero-infinity-1t-dgx2.yaml"  # DeepSpeed ZeRO-3, state on NVMe
CODE = "[W-FRAMEWORK-LIMIT]"


def _validate(cli, path: str, *sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = cli("validate", path, *args)
    assert code == 0, err  # a note beside a valid scenario, never an error
    return err


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_1_2_muon_is_noted_with_deepspeeds_refusal_and_what_it_would_do(cli, stage):
    sets = ("training.optimizer=muon", f"parallel.zero_stage={stage}")
    err = _validate(cli, ZERO2, *sets, "placement.optimizer_compute=gpu")
    assert CODE in err
    assert f"training.optimizer: muon under DeepSpeed ZeRO-{stage} is refused by DeepSpeed" in err
    assert "reduce_scatter: true (stage_1_and_2.py's assert)" in err
    assert "each whole matrix the rank's partition touches (no gather)" in err
    assert "no Muon at all" not in err  # the optimizer on the GPU here


def test_zero3_muon_is_noted_with_its_gathers_and_the_missing_cpu_path(cli):
    err = _validate(cli, ZERO3, "training.optimizer=muon")
    assert CODE in err and "(stage3.py's ValueError)" in err
    assert "all-gathers each bucket's momentum partitions whole" in err
    # its optimizer runs on the CPU (ZeRO-Infinity): DeepSpeed's Muon has no CPU path
    assert "with the optimizer on the CPU DeepSpeed has no Muon at all" in err


@pytest.mark.parametrize(
    "path, sets",
    [
        (ZERO2, ("training.optimizer=adam",)),  # not Muon
        (ZERO2, ("training.optimizer=muon", "training.framework=fsdp")),  # FSDP2: modelled
        (ZERO2, ("training.optimizer=muon", "parallel.zero_stage=0")),  # no ZeRO
    ],
)
def test_no_note_outside_deepspeed_zero_muon(cli, path, sets):
    assert CODE not in _validate(cli, path, *sets)


def test_with_reduce_scatter_false_the_refusal_is_not_said(cli):
    # ZeRO-2 with the optimizer on the GPU: DeepSpeed runs it, tiersim counts it
    # (tests/test_deepspeed_muon.py): no note
    sets = ("training.optimizer=muon", "placement.optimizer_compute=gpu")
    err = _validate(cli, ZERO2, *sets, "training.deepspeed.reduce_scatter=false")
    assert CODE not in err
    # the optimizer on the CPU: DeepSpeed has no Muon path there, whatever reduce_scatter says
    err = _validate(
        cli, ZERO2, "training.optimizer=muon", "training.deepspeed.reduce_scatter=false"
    )
    assert CODE in err and "DeepSpeed has no Muon path there" in err
    assert "refused by DeepSpeed" not in err


def test_zero3_muon_on_the_gpu_needs_the_momentum_kept_in_memory(cli):
    # stage3.py `_apply_distributed_muon_update`: neither swapped nor
    # save_muon_momentum_buffer_in_memory: ValueError
    sets = ("training.optimizer=muon", "training.deepspeed.reduce_scatter=false")
    gpu = ("placement.optimizer_compute=gpu", "placement.optimizer=hbm", "placement.master=hbm")
    err = _validate(cli, ZERO3, *sets, *gpu, "placement.gradients=hbm", "placement.weights=hbm")
    assert CODE in err and "save_muon_momentum_buffer_in_memory: true" in err
