"""Notes on `training.optimizer` where the implementation tiersim follows refuses what a
scenario asks:
- 8-bit AdamW with 16-bit weights on FSDP2's DTensors. There the optimizer is torchao's
  AdamW8bit (bitsandbytes' refuses DTensors, state/torchao_adamw8bit.py), whose 0.18.0 refused
  16-bit DTensors on the CPU, compiled and eager alike (docs/muon-fsdp.md, "8-bit AdamW under
  FSDP2"): tiersim's figures were measured with it stepping each rank's local shards, and its
  GPU step is not measured.
- Muon under DeepSpeed ZeRO (deepspeedai/DeepSpeed) with `zero_optimization.reduce_scatter`
  false, the only way DeepSpeed runs it (with it true, its default, DeepSpeed refuses Muon
  when the engine is built, and so does validation: config/deepspeed.py
  `muon_reduce_scatter_problems`, exit 2). What tiersim counts then is DeepSpeed's
  (state/deepspeed_muon.py, workload/data_parallel.py); notes remain where DeepSpeed runs it
  otherwise: the optimizer on the CPU (at the commits read, stage_1_and_2.py 02aa38c3 applies
  Muon only `if self.cpu_offload is False`, in `independent_gradient_partition_epilogue`, and
  `MuonWithAuxAdam.step` (muon_optimizer.py) adds the Muon group's gradient as it is: no
  momentum, no Newton-Schulz; its blog, blogs/muon-optimizer: "CPU Offloading -- in
  progress"), and ZeRO-3 on the GPU, which runs only with save_muon_momentum_buffer_in_memory
  (stage3.py 007cca6a, `_apply_distributed_muon_update`, raises ValueError otherwise), a key
  tiersim does not have. Without ZeRO DeepSpeed applies no Muon at all (`MUON_ZERO0`).
"""

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
    muon = _deepspeed_muon_notes(s)  # says what the CPU does for DeepSpeed's Muon itself
    notes = _fsdp2_8bit_notes(s) + _fsdp2_master_notes(s) + _own_precision_notes(s) + muon
    return notes + ([] if muon else _cpu_rate_notes(s))


def _fsdp2_master_notes(s: Scenario) -> list[Problem]:
    """A master copy beside FSDP2's shards (the schema's default precision is DeepSpeed's and
    Megatron's, bf16 weights and an fp32 master). FSDP2 keeps one sharded copy of each
    parameter, which the optimizer steps (torch 2.13 _fully_shard: `FSDPParam.sharded_param`);
    torchtitan's and Accelerate's mixed precision cast it to param_dtype for compute only
    (docs/fsdp2-memory.md, "Mixed precision"). Counted as written, the gradient shards and the
    reduce-scatter are in the 16-bit weights' dtype where torchtitan's default reduces in fp32
    (`mixed_precision_reduce`): a checkpoint, a gradient shard and the collective's bytes that
    the scenario the user means would not have, said rather than refused (a custom optimizer
    may keep such a master). Written or the schema's default alike: a results folder's
    scenario.yaml writes every value, and its rerun must say what the first run said."""
    p = s.training.precision
    if s.training.framework != "fsdp" or p.master == "none":
        return []
    why = (
        f"{p.master} beside weights {p.weights} under training.framework: fsdp: FSDP2 keeps "
        "one sharded copy of each parameter, which the optimizer steps, and no master beside "
        f"it; counted as written (the shards in {p.weights}, the master in {p.master}, the "
        f"gradient shards in {p.weights}, reduced in {p.gradients}); expected FSDP2's mixed "
        "precision as torchtitan runs it, training.precision: {weights: fp32, gradients: fp32, "
        "master: none, compute: bf16} (Accelerate's reduces in bf16: gradients: bf16; "
        'docs/fsdp2-memory.md, "Mixed precision")'
    )
    return [Problem("training.precision.master", why, "W-FRAMEWORK-LIMIT")]


def _own_precision_notes(s: Scenario) -> list[Problem]:
    """An optimizer whose state keeps a precision of its own (`own_state_precision`: adamw8bit's
    are 8-bit by construction, bitsandbytes' uint8 state1 / state2 and fp32 block absmax, fp32
    states below min_8bit_size; state/adamw8bit.py): a given `training.precision.optimizer`
    changes no byte (the inventory is the same at fp32, bf16 and fp8)."""
    precision, name = s.training.precision, s.training.optimizer
    own = optimizer(name).own_state_precision
    if not own or "optimizer" not in precision.model_fields_set:
        return []
    why = f"{precision.optimizer} has no effect: {name} {own}, whatever this says (leave it out)"
    return [Problem("training.precision.optimizer", why, "W-NO-EFFECT")]


def _cpu_rate_notes(s: Scenario) -> list[Problem]:
    """Another optimizer on the CPU: workload/cpu_optimizer.py times every update at
    hardware.cpu.optimizer_rate (or adam_kernel_rate), an AdamW step's rate (`tiersim
    calibrate` times torch's AdamW; the presets' are DeepSpeed's CPU-Adam): SGD's, Lion's,
    8-bit AdamW's or Muon's Newton-Schulz iterations on the CPU are measured nowhere."""
    name = s.training.optimizer
    if s.placement.optimizer_compute != "cpu" or optimizer(name).cpu_rated:
        return []
    why = (
        f"{name} with placement.optimizer_compute: cpu is timed at hardware.cpu.optimizer_rate "
        "(or adam_kernel_rate), a CPU AdamW step's rate (`tiersim calibrate` times torch's "
        f"AdamW): no CPU step of {name} is measured, so its update takes AdamW's time a "
        "parameter, or its own bytes over host memory bandwidth where those bind; expected "
        f"hardware.cpu.optimizer_rate set to a measurement of {name} (docs/science.md, "
        '"CPU optimizer")'
    )
    return [Problem(WHERE, why, "W-UNMEASURED")]


# reduce_scatter false, the optimizer on the CPU: no Muon path in DeepSpeed
MUON_NO_CPU = (
    "muon under DeepSpeed ZeRO-{stage} with the optimizer on the CPU: DeepSpeed has no Muon "
    "path there at the source read (muon_update runs only without cpu_offload, and "
    "MuonWithAuxAdam.step adds the Muon group's gradient as it is: no momentum, no "
    "Newton-Schulz; its blog, blogs/muon-optimizer: CPU offloading in progress); tiersim "
    "counts the all-reduces of reduce_scatter false, a partitioned momentum and the CPU's update"
)
# stage3.py `_apply_distributed_muon_update`: the momentum is swapped (NVMe) or kept in memory
# only with the config's save_muon_momentum_buffer_in_memory, else `raise ValueError`
MUON_ZERO3_MEMORY = (
    "muon under DeepSpeed ZeRO-3 with the optimizer on the GPU runs only with "
    "save_muon_momentum_buffer_in_memory: true in the DeepSpeed config (stage3.py raises "
    "ValueError otherwise); counted as run with it (state/deepspeed_muon.py)"
)


# engine.py 007cca6a builds muon_optimizer.MuonWithAuxAdam, whose step adds the Muon group's
# gradient as it is: the Muon update is ZeRO-1/2/3's (muon_update in their reduction paths)
MUON_ZERO0 = (
    "muon under DeepSpeed without ZeRO (parallel.zero_stage 0): DeepSpeed's MuonWithAuxAdam "
    "(muon_optimizer.py) leaves the Muon update to its ZeRO optimizers and adds the Muon "
    "group's gradient as it is (no momentum, no Newton-Schulz); tiersim counts Muon's "
    "momentum and Newton-Schulz (expected parallel.zero_stage 1, 2 or 3 with "
    "training.deepspeed.reduce_scatter: false)"
)


def _deepspeed_muon_notes(s: Scenario) -> list[Problem]:
    """Muon under DeepSpeed ZeRO with reduce_scatter false, run otherwise than counted (the
    module's docstring); with it true, DeepSpeed's refusal is an error, not a note."""
    stage, tr = s.parallel.zero_stage, s.training
    if not optimizer(tr.optimizer).deepspeed_whole_matrices or tr.framework != "deepspeed":
        return []
    if stage == 0:
        return [Problem(WHERE, MUON_ZERO0, "W-FRAMEWORK-LIMIT")]
    on_cpu = s.placement.optimizer_compute == "cpu"
    if tr.deepspeed.reduce_scatter:
        return []  # DeepSpeed refuses it: an error (config/deepspeed.py)
    if on_cpu:
        why = MUON_NO_CPU.format(stage=stage)
    elif stage == 3:
        why = MUON_ZERO3_MEMORY
    else:
        return []
    return [Problem(WHERE, why, "W-FRAMEWORK-LIMIT")]


def _fsdp2_8bit_notes(s: Scenario) -> list[Problem]:
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
