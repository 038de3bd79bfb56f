"""`training.distributed_optimizer`: which ZeRO-1 optimizer shards the state under
`framework: megatron`. `megatron` (or null) is Megatron-Core's distributed optimizer; `apex`
is apex's DistributedFusedAdam as NeMo 1.x drives it (NeMo-Framework-Launcher's training
configs, `optim.name: distributed_fused_adam`, through nemo/core/optim/distributed_adam.py
`MegatronDistributedFusedAdam`). What it holds is counted in state/sharding.py (gradients)
and state/step_optimizer.py (the reduce-scattered gradient shards); docs/memory.md, "FP8
training", lists it.

The precisions say NeMo's settings: `gradients` is apex's `grad_sync_dtype` (its default the
optimizer's fp32; the launcher's H100 scripts pass `optim.grad_sync_dtype=bf16`), `master`
bf16 the 16-bit remainders NeMo asks for with bf16 weights and an fp32 optimizer
(megatron_base_model.py `setup_optimization`: `store_params=False`,
`store_param_remainders=True`; apex keeps them as an int16 shard, 2 B a value)."""

from __future__ import annotations

from tiersim.config.apex_optim import ApexOptim
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.state.optimizers import optimizer

KEY = "training.distributed_optimizer"
APEX_KEY = "training.apex"


def distributed_optimizer_problems(s: Scenario) -> list[Problem]:
    """`apex` outside what NeMo runs it with: refused (exit 2), one problem each."""
    tr = s.training
    if tr.distributed_optimizer != "apex":
        return []
    problems = []
    if tr.framework != "megatron":
        got = f"got {tr.framework!r}" if tr.framework else "no training.framework given"
        what = f"'apex' needs training.framework: megatron ({got})"
        problems.append(Problem(KEY, what, "E-CONFLICT"))
    if s.parallel.zero_stage != 1:
        what = (
            f"'apex' shards the optimizer state and master remainders over the data x context "
            f"ranks and keeps a whole gradient buffer: expected parallel.zero_stage 1 "
            f"(got {s.parallel.zero_stage})"
        )
        problems.append(Problem("parallel.zero_stage", what, "E-CONFLICT"))
    prec = tr.precision
    wanted = prec.weights == "bf16" and prec.optimizer == "fp32" and prec.master == "bf16"
    if not wanted or not optimizer(tr.optimizer).apex_distributed:
        what = (
            "'apex' is counted as NeMo runs DistributedFusedAdam: Adam or AdamW with weights "
            "bf16, optimizer fp32 and master bf16 (the int16 remainders of "
            f"store_param_remainders); got optimizer {tr.optimizer}, weights {prec.weights}, "
            f"master {prec.master}, optimizer state {prec.optimizer}"
        )
        problems.append(Problem(KEY, what, "E-CONFLICT"))
    if tr.apex.contiguous_param_buffer and tr.fp8 is not None and tr.fp8.param_gather:
        what = (
            "contiguous_param_buffer is counted for the 16-bit weights apex all-gathers; "
            "with training.fp8.param_gather the linear weights are FP8 (NeMo's fp8_params, "
            "uint8 buckets), which is not modelled: expected one of the two"
        )
        problems.append(Problem(f"{APEX_KEY}.contiguous_param_buffer", what, "E-CONFLICT"))
    return problems


def distributed_optimizer_notes(s: Scenario) -> list[Problem]:
    """`megatron` chooses Megatron-Core's distributed optimizer, which only `framework:
    megatron` runs: under another framework (or none) the key changes nothing (a note);
    likewise `training.apex` where apex does not run."""
    tr = s.training
    if tr.distributed_optimizer != "megatron" or tr.framework == "megatron":
        return apex_settings_notes(s)
    got = f"training.framework is {tr.framework}" if tr.framework else "no training.framework"
    why = (
        f"megatron has no effect: it chooses Megatron-Core's distributed optimizer, which "
        f"training.framework megatron runs ({got}: its own sharding, parallel.zero_stage, "
        f"is what is counted)"
    )
    return [Problem(KEY, why, "W-NO-EFFECT"), *apex_settings_notes(s)]


def apex_settings_notes(s: Scenario) -> list[Problem]:
    """`training.apex` set where apex does not run (`distributed_optimizer` other than apex,
    or a framework other than megatron): it changes nothing (a note)."""
    tr = s.training
    if tr.apex == ApexOptim() or (
        tr.distributed_optimizer == "apex" and tr.framework == "megatron"
    ):
        return []
    why = (
        "has no effect: it sets apex DistributedFusedAdam's buckets, counted only under "
        "training.distributed_optimizer: apex with training.framework: megatron (got "
        f"distributed_optimizer {_given(tr.distributed_optimizer)}, framework "
        f"{_given(tr.framework)})"
    )
    return [Problem(APEX_KEY, why, "W-NO-EFFECT")]


def _given(value: object) -> str:
    """A key's value as the user would write it: one left out is 'not set', not Python's None."""
    return "not set" if value is None else str(value)
