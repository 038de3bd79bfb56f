"""What Megatron-Core refuses with `parallel.overlap_expert_comm` (its
--overlap-moe-expert-parallel-comm) under `training.framework: megatron`.

Megatron-Core asserts these in `TransformerConfig.__post_init__` (NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py @ 002526d81b81, the block under
`if self.overlap_moe_expert_parallel_comm:`); an assert fails the job at start-up, so tiersim
refuses the scenario (exit 2) rather than price a run that never starts:
- pipeline > 1 needs a virtual pipeline ("virtual_pipeline_model_parallel_size must be
  specified when pipeline_model_parallel_size > 1": combined 1F1B is built on interleaving);
- expert parallelism ("only supported with expert model parallelism");
- "moe" not in the recompute modules;
- full recompute only as the whole model chunk: no recompute_method nor recompute_num_layers
  (tiersim's `training.recompute_every`), no dropout (its replay across the interleaved
  micro-batches is not supported), not with delayed-scaling FP8 (the replay would update the
  amax history twice);
- a bf16 or fp16 model; at most one MTP layer.
Its other asserts name settings tiersim has no key for, each satisfied as tiersim models the
step (docs/moe.md): the all-to-all dispatcher (alltoall), no shared-expert overlap, no CUDA
graphs, no paged stash, no hash MoE layers, torch >= 2.6.
Under another framework, or none, nothing is checked: whether DeepSpeed or FSDP2/torchtitan
ship such an overlap, and what they refuse with it, has not been read from their sources
(docs/moe.md)."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

SOURCE = "megatron/core/transformer/transformer_config.py @ 002526d81b81, __post_init__"
OFF = "or parallel.overlap_expert_comm: false"
# Megatron-LM's --attention-dropout and --hidden-dropout defaults, taken where the model leaves
# them out as state/accounting.py `accounting_for` takes them (config sits below state)
MEGATRON_DROPOUT = 0.1


def _dropout(s: Scenario, key: str) -> float:
    given = getattr(s.model, key)
    if given is not None:
        return given
    gpt2 = s.model.norm == "layernorm" and s.model.parameters is None
    return MEGATRON_DROPOUT if s.training.implementation == "megatron" or gpt2 else 0.0


def _conflict(path: str, what: str, reason: str, instead: str) -> Problem:
    why = (
        f"{what} is refused by Megatron-Core with parallel.overlap_expert_comm (its "
        f"--overlap-moe-expert-parallel-comm): {reason} ({SOURCE}; expected {instead}, {OFF})"
    )
    return Problem(path, why, "E-CONFLICT")


def _layout_problems(s: Scenario) -> list[Problem]:
    par, problems = s.parallel, []
    if par.pipeline > 1 and par.virtual_pipeline == 1:
        reason = (
            "'virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1' (combined 1F1B runs on the interleaved schedule)"
        )
        instead = "parallel.virtual_pipeline 2 or more, or parallel.pipeline: 1"
        what = f"pipeline {par.pipeline} with virtual_pipeline 1 (plain 1F1B)"
        problems.append(_conflict("parallel.virtual_pipeline", what, reason, instead))
    if par.expert == 1:
        reason = "'only supported with expert model parallelism'"
        problems.append(_conflict("parallel.expert", "1", reason, "parallel.expert 2 or more"))
    return problems


def _full_recompute_problems(s: Scenario) -> list[Problem]:
    tr, problems = s.training, []
    if tr.recompute_every is not None:
        reason = (
            "'recompute_num_layers must be None' (full recompute runs on the whole model "
            "chunk, no --recompute-method nor --recompute-num-layers)"
        )
        what = str(tr.recompute_every)
        problems.append(_conflict("training.recompute_every", what, reason, "the key left out"))
    for key in ("attention_dropout", "hidden_dropout"):
        p = _dropout(s, key)
        if p > 0:
            reason = (
                "full recompute 'currently requires attention_dropout==0 and hidden_dropout==0' "
                "(RNG replay across the interleaved 1F1B schedule is not supported)"
            )
            shown = f"{p:g}" + (
                " (the implementation's default)" if getattr(s.model, key) is None else ""
            )
            problems.append(_conflict(f"model.{key}", shown, reason, f"model.{key}: 0"))
    if tr.fp8 is not None and tr.fp8.recipe == "delayed":
        reason = (
            "full recompute 'is not yet supported with delayed-scaling FP8' (the replay would "
            "update the amax history twice)"
        )
        instead = "a current-scaling recipe (tensorwise, mxfp8, blockwise)"
        problems.append(_conflict("training.fp8.recipe", "delayed", reason, instead))
    return problems


def expert_overlap_problems(s: Scenario) -> list[Problem]:
    """Megatron-Core's asserts on its overlap, under `training.framework: megatron`."""
    if s.training.framework != "megatron" or not s.parallel.overlap_expert_comm:
        return []
    tr, problems = s.training, _layout_problems(s)
    if tr.recompute == "full":
        problems += _full_recompute_problems(s)
    if "moe" in (tr.recompute_modules or ()):
        reason = "'disable moe in recompute_modules'"
        instead = "recompute_modules without moe"
        problems.append(_conflict("training.recompute_modules", "moe", reason, instead))
    precision = tr.precision.compute_precision
    if precision not in ("bf16", "fp16"):
        reason = "'only supported with bf16 or fp16 model'"
        instead = "training.precision.compute: bf16 (or fp16)"
        # the key that set it: compute, else the weights' precision it defaults to
        key = "compute" if tr.precision.compute else "weights"
        problems.append(_conflict(f"training.precision.{key}", precision, reason, instead))
    if s.model.mtp_layers > 1:
        reason = "'MTP layernum only supports 1'"
        what = str(s.model.mtp_layers)
        problems.append(_conflict("model.mtp_layers", what, reason, "model.mtp_layers 0 or 1"))
    return problems
