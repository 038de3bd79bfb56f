"""`validate` (and every command that reads a scenario) notes 8-bit AdamW on FSDP2's sharded
16-bit weights: there tiersim follows torchao's AdamW8bit, whose DTensor step refused 16-bit
DTensors where it was measured (docs/muon-fsdp.md), so its bf16 figures were measured with it
stepping each rank's local shards, not as a run steps it. fp32 weights (measured as DTensors),
unsharded weights and other optimizers get no note."""

from __future__ import annotations

import pytest

SCENARIO = "scenarios/fsdp2-cpu-offload-llama2-7b.yaml"  # framework fsdp, zero_stage 3, fp32
CODE = "[W-UNMEASURED]"


def _validate(cli, *sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = cli("validate", SCENARIO, *args)
    assert code == 0, err
    return err


@pytest.mark.parametrize("weights", ["bf16", "fp16"])
def test_8bit_adamw_on_sharded_16bit_weights_is_noted(cli, weights):
    err = _validate(
        cli,
        "training.optimizer=adamw8bit",
        f"training.precision.weights={weights}",
        "training.precision.master=fp32",
    )
    assert CODE in err
    assert f"training.optimizer: adamw8bit on FSDP2's sharded {weights} weights" in err
    assert "torchao" in err and "stepping each rank's local shards" in err


@pytest.mark.parametrize(
    "sets",
    [
        ("training.optimizer=adamw8bit",),  # fp32 weights: the measured case
        ("training.optimizer=adamw",),
        (  # ZeRO-2: the weights are whole on every rank, no DTensor steps
            "training.optimizer=adamw8bit",
            "training.precision.weights=bf16",
            "training.precision.master=fp32",
            "parallel.zero_stage=2",
        ),
    ],
)
def test_no_note_where_the_case_is_measured_or_does_not_apply(cli, sets):
    # the scenario's CPU update is noted apart (W-UNMEASURED too: adamw8bit on the CPU timed
    # at the CPU AdamW rate, tests/test_review_2026_12_07.py)
    assert "on FSDP2's sharded" not in _validate(cli, *sets)
