"""Notes on `training.optimizer` where the implementation tiersim follows refuses what a
scenario asks: 8-bit AdamW with 16-bit weights on FSDP2's DTensors. There the optimizer is
torchao's AdamW8bit (bitsandbytes' refuses DTensors, state/torchao_adamw8bit.py), whose 0.18.0
refused 16-bit DTensors on the CPU, compiled and eager alike (docs/muon-fsdp.md, "8-bit AdamW
under FSDP2"): tiersim's figures were measured with it stepping each rank's local shards, and
its GPU step is not measured."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.state.optimizers import optimizer

WHERE = "training.optimizer"
SIXTEEN_BIT = ("bf16", "fp16")


def _weights_sharded(s: Scenario) -> bool:
    """FSDP2 shards the weights (ZeRO-3's sharding, or `parallel.shard.weights`)."""
    given = s.parallel.shard.weights
    return s.parallel.zero_stage >= 3 if given is None else given


def optimizer_notes(s: Scenario) -> list[Problem]:
    tr = s.training
    if tr.framework != "fsdp" or not _weights_sharded(s):
        return []
    if tr.precision.weights not in SIXTEEN_BIT:
        return []
    if optimizer(tr.optimizer).dtensor_refusal(tr.precision.weights) is None:
        return []  # the registry's: only 8-bit AdamW's DTensor step refuses 16-bit weights
    why = (
        f"adamw8bit on FSDP2's sharded {tr.precision.weights} weights is torchao's AdamW8bit, "
        "whose DTensor step refused 16-bit DTensors where tiersim measured it (torchao 0.18.0 "
        "on the CPU, eager and compiled; its GPU step is not measured): tiersim's bf16 "
        "figures were measured with it stepping each rank's local shards, not through DTensor "
        "as a run would (docs/muon-fsdp.md); fp32 weights are measured as DTensors"
    )
    return [Problem(WHERE, why, "W-UNMEASURED")]
