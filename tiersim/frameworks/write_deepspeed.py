"""A scenario as a DeepSpeed JSON config: the inverse of tiersim.frameworks.deepspeed."""

from __future__ import annotations

import json

from tiersim.config.schema import Scenario
from tiersim.config.zeropp import given_settings
from tiersim.core.errors import Problem
from tiersim.frameworks.written import Emitted, framework_note, global_batch
from tiersim.state.optimizers import optimizer

_DS_TIER = {"dram": "cpu", "nvme": "nvme"}
_OFFLOAD_KEYS = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "max_live_parameters": "stage3_max_live_parameters",
    "sub_group_size": "sub_group_size",
    "reduce_bucket_size": "reduce_bucket_size",
    "overlap_comm": "overlap_comm",
}


def write_deepspeed(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    framework_note(s, "deepspeed", "deepspeed", notes)
    t, p, pl = s.training, s.parallel, s.placement
    if p.pipeline != 1:
        why = f"{p.pipeline}: a DeepSpeed config has no pipeline parallelism (Megatron's)"
        notes.append(Problem("parallel.pipeline", why, "W-EMIT-APPROXIMATE"))
    zero = _zero(s, notes)
    cfg: dict[str, object] = {
        "train_batch_size": global_batch(s),
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.grad_accumulation,
        "zero_optimization": zero,
    }
    if p.tensor > 1:  # DeepSpeed's AutoTP training, as the reader takes it (deepspeed.py)
        cfg["tensor_parallel"] = {"autotp_size": p.tensor}
    precision = t.precision.weights
    if precision in ("fp16", "bf16"):
        cfg[precision] = {"enabled": True}
    if precision in ("fp16", "bf16") and t.precision.master == precision and offloaded(s):
        # DeepSpeed runs it only under its optimizer offload (frameworks/deepspeed_master.py);
        # elsewhere the read-back check names the master the file cannot say
        cfg[precision][f"{precision}_master_weights_and_grads"] = True
    if t.precision.gradients != (precision if precision in ("fp16", "bf16") else "fp32"):
        cfg["data_types"] = {"grad_accum_dtype": t.precision.gradients}
    if t.recompute == "full":
        cfg["activation_checkpointing"] = {"cpu_checkpointing": pl.activations == "dram"}
        if (t.recompute_every or 1) > 1:
            why = f"{t.recompute_every}: the model code decides which layers DeepSpeed checkpoints"
            notes.append(Problem("training.recompute_every", why, "W-EMIT-APPROXIMATE"))
    elif t.recompute != "none":
        why = f"{t.recompute}: DeepSpeed's activation checkpointing is whole layers (full)"
        notes.append(Problem("training.recompute", why, "W-EMIT-APPROXIMATE"))
    name = optimizer(t.optimizer).deepspeed_type  # the registry's (state/optimizers.py)
    if not name:
        notes.append(
            Problem(
                "training.optimizer",
                f"{t.optimizer}: no DeepSpeed optimizer type",
                "W-EMIT-APPROXIMATE",
            )
        )
    else:
        cfg["optimizer"] = {"type": name}
    return Emitted("deepspeed", json.dumps(cfg, indent=2) + "\n", notes)


def offloaded(s: Scenario) -> bool:
    """The optimizer offloaded under a ZeRO stage: what DeepSpeed's low-precision master needs."""
    return s.parallel.zero_stage > 0 and s.placement.optimizer_compute == "cpu"


def _zero(s: Scenario, notes: list[Problem]) -> dict[str, object]:
    """zero_optimization: the stage, the buckets given, and the offload sections."""
    t, pl = s.training, s.placement
    zero: dict[str, object] = {"stage": s.parallel.zero_stage}
    for ours, theirs in _OFFLOAD_KEYS.items():
        value = getattr(t.offload, ours)
        if value is not None:
            zero[theirs] = value
    zero |= {
        k: v
        for k, v in t.deepspeed.model_dump().items()
        if k.startswith("stage3_") and v is not None
    }
    if s.parallel.zero_stage != 3:
        _drop_stage3(zero, s.parallel.zero_stage, notes)
    if not t.deepspeed.reduce_scatter:  # DeepSpeed's default true is left to it
        zero["reduce_scatter"] = False
    zero |= given_settings(t.deepspeed)  # ZeRO++'s, under DeepSpeed's names (config/zeropp.py)
    whole = optimizer(t.optimizer).deepspeed_whole_matrices  # DeepSpeed's Muon
    if whole and s.parallel.zero_stage == 3 and pl.optimizer_compute == "gpu":
        # stage3.py raises ValueError without it (the momentum neither swapped nor kept):
        # tiersim counts ZeRO-3's Muon as run with it (state/deepspeed_muon.py)
        zero["save_muon_momentum_buffer_in_memory"] = True
    if pl.optimizer_compute == "cpu":
        device = _DS_TIER.get(pl.optimizer)
        if device is None or pl.master != pl.optimizer:
            why = f"{pl.master} / {pl.optimizer}: DeepSpeed offloads both to cpu or nvme"
            notes.append(Problem("placement.optimizer", why, "W-EMIT-APPROXIMATE"))
            device = device or "cpu"
        section = _device(device)
        for key in ("pin_memory", "buffer_count", "pipeline_read", "pipeline_write"):
            value = getattr(t.offload, key)
            if value is not None:
                section[key] = value
        zero["offload_optimizer"] = section
        if pl.gradients != "dram":
            why = f"{pl.gradients}: DeepSpeed's offload keeps the fp32 gradients in host memory"
            notes.append(Problem("placement.gradients", why, "W-EMIT-APPROXIMATE"))
    if pl.weights != "hbm":
        zero["offload_param"] = _device(_DS_TIER.get(pl.weights, "cpu"))
        # tiersim's one pin_memory switch is DeepSpeed's two (offload_config.py: false each)
        if t.offload.pin_memory is not None:
            zero["offload_param"]["pin_memory"] = t.offload.pin_memory
    return zero


def _drop_stage3(zero: dict[str, object], stage: int, notes: list[Problem]) -> None:
    """The `stage3_*` keys are ZeRO-3's (deepspeed/runtime/zero/stage3.py reads them; the
    ZeRO-1/2 optimizer, stage_1_and_2.py, takes none of them): not written for another
    stage, a note naming each one the scenario gave."""
    for key in [k for k in zero if k.startswith("stage3_")]:
        why = f"{zero.pop(key)}: read by ZeRO-3 only, not written for stage {stage}"
        notes.append(Problem(_scenario_key(key), why, "W-EMIT-APPROXIMATE"))


def _scenario_key(key: str) -> str:
    """Where the scenario gave a `stage3_*` key: training.offload's older name, or
    training.deepspeed's own."""
    ours = {v: k for k, v in _OFFLOAD_KEYS.items()}.get(key)
    return f"training.offload.{ours}" if ours else f"training.deepspeed.{key}"


def _device(device: str) -> dict[str, object]:
    section: dict[str, object] = {"device": device}
    if device == "nvme":  # DeepSpeed needs a path; the drive is the hardware's nvme tier
        section["nvme_path"] = "/local_nvme"
    return section
