"""`tiersim measure --scenario FILE`: a resolved scenario as measure's settings (`Request`'s
fields and the FSDP2 ranks), each setting a CPU run can honour taken, each other one said in a
note (the scenario key, what it says, what is measured instead), and a refusal where nothing
sensible can be measured. The options typed beside the file (`typed`: a Request field, or
`fsdp`, to its value) win over the scenario's, and a note on a key they replace is not said.

What is taken: the model, seq_len, micro_batch_size, the optimizer, the compute precision as
measure's one dtype, the implementation (megatron: tiersim's own modules, predicted with the
megatron accounting; huggingface: transformers'), the attention kernel (left out: the one the
scenario's run counts, megatron's eager), and ZeRO-3 over the data ranks as FSDP2 on that many
CPU ranks; recompute where measure runs it (transformers' model, on one process or under FSDP2:
groundtruth/selective.py's set_recompute). What is not: tensor, pipeline, context and expert
splits (every layer whole on one process), FP8, other tiers than the GPU's memory, GPU-only
kernels, a precision mix (measure trains one precision throughout, no master copy).
"""

from __future__ import annotations

from typing import Any

from tiersim.config.schema import Scenario
from tiersim.core.errors import InputError, Problem
from tiersim.core.records import record
from tiersim.groundtruth.choices import DTYPES, OPTIMIZER_DEFAULT, OPTIMIZERS
from tiersim.state.activation_kinds import DEFAULT_KERNEL
from tiersim.state.optimizers import fsdp2_stepped

MAX_RANKS = 16  # measure_hf.measure_fsdp's: gloo processes on this host
IMPLEMENTATION = {"megatron": "tiersim", "huggingface": "huggingface", "torchtitan": "huggingface"}
# the scenario key each of measure's settings is read from (a problem measure finds in a
# setting the scenario gave is said at that key)
KEY_OF = {
    "model": "model",
    "seq_len": "training.seq_len",
    "micro_batch_size": "training.micro_batch_size",
    "optimizer": "training.optimizer",
    "dtype": "training.precision",
    "implementation": "training.implementation",
    "attention": "training.attention_kernel",
    "recompute": "training.recompute",
    "fsdp": "parallel.data",
}
# the keys whose notes an option typed replaces
NOTES_OF = {
    "optimizer": ("training.optimizer",),
    "dtype": ("training.precision",),
    "implementation": ("training.implementation",),
    "attention": ("training.attention_kernel",),
    "fsdp": ("parallel.data", "parallel.zero_stage"),
}


@record
class Settings:
    """What measure runs for a scenario: Request's fields, the FSDP2 ranks (None: one process),
    and the notes (W-MEASURE-INSTEAD) on what it runs otherwise than the scenario says."""

    fields: dict[str, Any]
    fsdp: int | None
    notes: tuple[Problem, ...]


def measure_settings(s: Scenario, source: str, typed: dict[str, Any] | None = None) -> Settings:
    """Measure's settings for scenario `s` (read from `source`), the options `typed` winning."""
    typed = {k: v for k, v in (typed or {}).items() if v is not None}
    if s.model.parameters is not None:
        what = (
            f"a generic model ({s.model.parameters:,} parameters, no layer shape) cannot be "
            "built in PyTorch (expected a transformer: a preset, an hf_config or its dimensions)"
        )
        raise InputError(source, [Problem("model.parameters", what, "E-MEASURE")])
    notes: list[Problem] = []
    fields: dict[str, Any] = {
        "seq_len": s.training.seq_len,
        "micro_batch_size": s.training.micro_batch_size,
        "optimizer": _optimizer(s, notes),
        "dtype": _dtype(s, notes),
        "implementation": _implementation(s, notes),
    }
    fields["attention"] = _attention(s, notes)
    fields |= {k: v for k, v in typed.items() if k != "fsdp"}
    fsdp = typed["fsdp"] if "fsdp" in typed else _fsdp(s, fields, notes)
    fields["recompute"] = _recompute(s, fields, fsdp, notes)
    _framework(s, fsdp, notes)
    notes += _unsplit(s) + _kernels(s) + _placed(s)
    dropped = {key for field in typed for key in NOTES_OF.get(field, ())}
    kept = tuple(n for n in notes if n.path not in dropped)
    return Settings(
        fields={k: v for k, v in fields.items() if v is not None}, fsdp=fsdp, notes=kept
    )


def _said(key: str, message: str) -> Problem:
    """A note: the scenario's `key` is measured otherwise, as `message` says."""
    return Problem(key, message, "W-MEASURE-INSTEAD")


def _note(notes: list[Problem], key: str, message: str) -> None:
    notes.append(_said(key, message))


def _optimizer(s: Scenario, notes: list[Problem]) -> str:
    name = s.training.optimizer
    if name in OPTIMIZERS:
        return name
    built = ", ".join(OPTIMIZERS)
    _note(
        notes,
        "training.optimizer",
        f"{name}: not one measure builds in PyTorch ({built}); measured with "
        f"{OPTIMIZER_DEFAULT}, whose optimizer state differs",
    )
    return OPTIMIZER_DEFAULT


def _dtype(s: Scenario, notes: list[Problem]) -> str:
    """The compute precision (the activations'), as measure's one precision; a mix noted."""
    p = s.training.precision
    compute = p.compute_precision
    dtype = compute if compute in DTYPES else "fp32" if compute == "tf32" else "bf16"
    held = {"weights": p.weights, "gradients": p.gradients, "optimizer": p.optimizer}
    held["master"] = p.master
    if compute != dtype or any(v != ("none" if k == "master" else dtype) for k, v in held.items()):
        said = ", ".join(f"{k} {v}" for k, v in {**held, "compute": compute}.items())
        why = "" if compute == dtype else f"compute {compute} is not one measure trains; "
        _note(
            notes,
            "training.precision",
            f"{said}: {why}measure trains one precision throughout, with no master copy: "
            f"measured all {dtype}",
        )
    if s.training.fp8 is not None:
        _note(
            notes,
            "training.fp8",
            f"FP8 linear layers are not run on the CPU: measured in {dtype}, without FP8's "
            "weight copies and scaling state",
        )
    return dtype


def _implementation(s: Scenario, notes: list[Problem]) -> str:
    name = s.training.implementation
    if name == "torchtitan":
        _note(
            notes,
            "training.implementation",
            "torchtitan: measure has no torchtitan model code; measured transformers' model, "
            "predicted with the huggingface accounting",
        )
    return IMPLEMENTATION[name]


def _attention(s: Scenario, notes: list[Problem]) -> str:
    """The kernel the scenario's run counts: left out, its implementation's default
    (state/accounting.py `accounting_for`: megatron's eager), not measure's own sdpa."""
    kernel = s.training.attention_kernel or DEFAULT_KERNEL[s.training.implementation]
    if kernel == "flash":
        _note(
            notes,
            "training.attention_kernel",
            "flash: FlashAttention runs on a GPU only; measured with sdpa "
            "(torch's scaled_dot_product_attention)",
        )
        return "sdpa"
    return kernel


def _fsdp(s: Scenario, fields: dict[str, Any], notes: list[Problem]) -> int | None:
    """ZeRO-3 over the data ranks as FSDP2 on as many CPU ranks, where measure runs it."""
    data, stage = s.parallel.data, s.parallel.zero_stage
    if stage in (1, 2) and data > 1:
        _note(
            notes,
            "parallel.zero_stage",
            f"{stage} over {data} data ranks: measure shards only as FSDP2 (ZeRO-3); measured "
            "on one process holding every state unsharded",
        )
    if stage != 3:
        if stage == 0 and data > 1:
            _note(
                notes,
                "parallel.data",
                f"{data} replicas: one measured, on one process (no gradient all-reduce)",
            )
        return None
    hf = fields["implementation"] == "huggingface"
    if data == 1 and not hf:
        return None  # sharded over one rank: tiersim's modules hold the same on one process
    why = _why_not_fsdp(data, fields["optimizer"], hf)
    if why:
        _note(notes, "parallel.data", f"{data} ranks under ZeRO-3: {why}; measured on one process")
        return None
    if s.parallel.shard_group not in (None, data):
        _note(
            notes,
            "parallel.shard_group",
            f"{s.parallel.shard_group}: FSDP2 measured sharding over all {data} ranks (no HSDP)",
        )
    if s.parallel.reshard_after_forward is False:
        _note(
            notes,
            "parallel.reshard_after_forward",
            "false: measured with FSDP2 resharding after forward (measure's fully_shard)",
        )
    return data


def _framework(s: Scenario, fsdp: int | None, notes: list[Problem]) -> None:
    """A framework's engine, which measure does not run: PyTorch's FSDP2 or a plain step."""
    framework = s.training.framework
    if framework in (None, "fsdp"):
        return
    if fsdp is not None:
        what = "its ZeRO-3 measured as PyTorch's FSDP2 (fully_shard), whose padding, buffers "
        _note(notes, "training.framework", f"{framework}: {what}and gathers are PyTorch's")
        return
    what = "measured as a plain PyTorch step, without the engine's own buffers and copies"
    _note(notes, "training.framework", f"{framework}: {what}")


def _why_not_fsdp(data: int, optimizer: str, hf: bool) -> str:
    if data > MAX_RANKS:
        return f"measure runs FSDP2 on at most {MAX_RANKS} CPU processes"
    stepped = fsdp2_stepped(adamw_state=not hf)
    if optimizer not in stepped:
        modules = "transformers' model" if hf else "tiersim's modules"
        return f"measure's FSDP2 with {modules} steps {' or '.join(stepped)}, not {optimizer}"
    return ""


def _recompute(s: Scenario, fields: dict[str, Any], fsdp: int | None, notes: list) -> str:
    """Recompute where measure runs it: transformers' model (groundtruth/selective.py)."""
    name = s.training.recompute
    if name == "none":
        return "none"
    runs = fields["implementation"] == "huggingface"
    if runs and name != "selective_op":
        if s.training.recompute_every not in (None, 1):
            _note(
                notes,
                "training.recompute_every",
                f"{s.training.recompute_every}: measured with every layer recomputed",
            )
        if name == "selective" and s.training.recompute_modules is not None:
            _note(
                notes,
                "training.recompute_modules",
                "measured with the attention core recomputed (Korthikanti et al.'s selective)",
            )
        return name
    where = (
        "torchtitan's op-level policy is not one measure runs"
        if name == "selective_op"
        else "measure recomputes only with transformers' model (--implementation huggingface)"
    )
    _note(notes, "training.recompute", f"{name}: {where}; measured without recompute")
    return "none"


def _unsplit(s: Scenario) -> list[Problem]:
    """The splits of a layer or of the layers that one process does not run."""
    p, out = s.parallel, []
    splits = (
        ("parallel.tensor", p.tensor, "each layer's matrices whole"),
        ("parallel.pipeline", p.pipeline, "every layer, not one stage's"),
        ("parallel.context", p.context, "each sequence's tokens whole"),
        ("parallel.expert", p.expert, "every expert"),
    )
    for key, ranks, whole in splits:
        if ranks > 1:
            out.append(_said(key, f"{ranks} ranks: measured with {whole} on one process"))
    return out


def _kernels(s: Scenario) -> list[Problem]:
    """GPU-only kernels and fusions a CPU step runs without."""
    t, out = s.training, []
    if t.flash_kernel is not None:
        out.append(_said("training.flash_kernel", f"{t.flash_kernel}: a GPU kernel; not run"))
    if t.loss_fusion != "none":
        what = f"{t.loss_fusion}: measured with the unfused cross-entropy"
        out.append(_said("training.loss_fusion", what))
    if t.loss_chunks is not None:
        what = f"{t.loss_chunks}: measured with the loss over the whole vocabulary at once"
        out.append(_said("training.loss_chunks", what))
    if t.compile:
        out.append(_said("training.compile", "true: measured eagerly (not compiled)"))
    return out


def _placed(s: Scenario) -> list[Problem]:
    """State placed off the GPU's memory: one process holds it all in its own memory."""
    gpu, out = s.hardware.gpu.memory, []
    for cls in ("weights", "gradients", "master", "optimizer", "activations"):
        tier = getattr(s.placement, cls)
        if tier != gpu:
            what = f"{tier}: not offloaded; measured in the memory of the device that trains"
            out.append(_said(f"placement.{cls}", what))
    if s.placement.optimizer_compute == "cpu":
        what = "cpu: the optimizer steps where the model trains (one device)"
        out.append(_said("placement.optimizer_compute", what))
    for cls, tier in s.placement.experts.model_dump(exclude_none=True).items():
        what = f"{tier}: not offloaded; measured in the memory of the device that trains"
        out.append(_said(f"placement.experts.{cls}", what))
    return out
