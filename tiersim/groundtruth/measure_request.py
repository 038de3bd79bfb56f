"""What `tiersim measure` is asked to measure (`Request`) and the tiersim scenario that predicts
it, checked for what the PyTorch side can build; and PyTorch itself, imported or the user told
how to install it. Both sides of the measurement (measure.py: tiersim's own modules;
measure_hf.py: transformers) read these; measure.py, which runs either, sits above both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any

from tiersim.config.load import build, preset_texts
from tiersim.config.schema import Scenario
from tiersim.config.variants import (
    MIXTRAL_VARIANTS,
    MLA_VARIANTS,
    VARIANT_DEFAULTS,
    given_variants,
)
from tiersim.config.yamllines import with_lines
from tiersim.core.errors import InputError, Problem
from tiersim.core.records import record
from tiersim.groundtruth.choices import ATTENTION, DEVICES, DTYPES, IMPLEMENTATIONS, OPTIMIZERS
from tiersim.state.optimizers import DEFAULT as optimizer_default
from tiersim.state.optimizers import optimizer as optimizer_named

# the MoE and attention keys transformers' Mixtral, Qwen2-MoE and DeepSeek-V3 express
# (hfmodels.family_of checks the rest)
HF_MOE_VARIANTS = (
    *MIXTRAL_VARIANTS,
    "shared_experts",
    "shared_expert_ffn_hidden",
    "shared_expert_gate",
    *MLA_VARIANTS,
    "expert_groups",
    "expert_groups_per_token",
    "first_dense_layers",
)

SOURCE = "tiersim measure"


@record
class Request:
    """What to measure; `model` is a scenario's `model` mapping (preset, hf_config or dims)."""

    model: dict[str, Any]
    seq_len: int | None = None
    micro_batch_size: int = 1
    optimizer: str = optimizer_default
    dtype: str = "bf16"
    attention: str = "sdpa"
    device: str = "auto"
    implementation: str = "tiersim"  # tiersim's own modules, or a transformers model
    dropout: float | None = None  # attention and hidden dropout (default: the model's)
    # training.recompute: run only with transformers' model (groundtruth/selective.py)
    recompute: str = "none"
    overrides: tuple[str, ...] = ()
    base_dir: Path = field(default_factory=Path.cwd)
    seed: int = 0


def invalid(key: str, message: str) -> InputError:
    """Bad input to `tiersim measure`, at `key` (an option or a scenario key path)."""
    return InputError(SOURCE, [Problem(key, message, "E-MEASURE")])


def model_dims(model: Any) -> dict[str, Any]:
    """A scenario's model as a preset's dimensions (no preset, config path or factor; layer
    variants only where set, lists as lists)."""
    dims = model.model_dump(exclude_none=True, exclude={"preset", "hf_config", "activation_factor"})
    set_variants = given_variants(model)
    out = {k: v for k, v in dims.items() if k not in VARIANT_DEFAULTS or k in set_variants}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def named_dims(req: Request) -> dict[str, Any]:
    """The dimensions of the model as named, without the `--set` overrides ({} where it does
    not validate without them)."""
    try:
        return model_dims(_scenario(dataclasses.replace(req, overrides=())).model)
    except InputError:
        return {}


def prediction_scenario(req: Request, fsdp: int | None = None) -> Scenario:
    """The tiersim scenario that describes exactly what `measure` runs (`fsdp`: FSDP2 over
    that many ranks, each the scenario's GPU)."""
    scenario = _scenario(req, fsdp)
    _check_measurable(scenario)
    return scenario


def _scenario(req: Request, fsdp: int | None = None) -> Scenario:
    for name, value, allowed in (
        ("optimizer", req.optimizer, OPTIMIZERS),
        ("dtype", req.dtype, DTYPES),
        ("attention", req.attention, ATTENTION),
        ("device", req.device, DEVICES),
        ("implementation", req.implementation, IMPLEMENTATIONS),
    ):
        if value not in allowed:
            expected = ", ".join(allowed)
            raise invalid(name, f"{value!r} is not one of: {expected}")
    why = optimizer_named(req.optimizer).missing(dtensors=fsdp is not None)
    if why:
        raise invalid("optimizer", f"{req.optimizer}: {why}")
    training: dict[str, Any] = {
        "micro_batch_size": req.micro_batch_size,
        "optimizer": req.optimizer,
        "precision": {k: req.dtype for k in ("weights", "gradients", "optimizer")},
        "workspace": "0 B",
    }
    training["precision"]["master"] = "none"
    if req.seq_len is not None:
        training["seq_len"] = req.seq_len
    model = dict(req.model)
    if req.implementation == "huggingface":
        if req.attention == "math":
            raise invalid("attention", "'math' is tiersim's own; transformers runs eager or sdpa")
        training |= {"implementation": "huggingface", "attention_kernel": req.attention}
    if req.dropout is not None:
        model |= {"attention_dropout": req.dropout, "hidden_dropout": req.dropout}
    if req.recompute != "none":
        if req.implementation != "huggingface":
            why = "measure recomputes only with transformers' model"
            raise invalid("recompute", f"{req.recompute!r}: {why} (expected none)")
        training["recompute"] = req.recompute
    raw = {"name": "measure", "model": model, "training": training}
    if fsdp is not None:
        raw |= {"parallel": {"data": fsdp, "zero_stage": 3}}
        training["framework"] = "fsdp"
    try:
        return build(raw, req.base_dir, SOURCE, list(req.overrides)).scenario
    except InputError as exc:  # a key of the --model file: its file and line, as validate's
        raise with_lines(exc, "", preset_texts(raw, req.base_dir)) from None


def _check_measurable(s: Scenario) -> None:
    m = s.model
    if m.parameters is not None:
        raise invalid(
            "model",
            "a generic model (given by 'parameters') cannot be built in "
            "PyTorch: give a transformer by preset, hf_config or dimensions",
        )
    variants = [k for k in given_variants(m) if not k.startswith("sliding_window")]
    if s.training.implementation == "huggingface":  # transformers builds Mixtral's MoE too
        variants = [k for k in variants if k not in HF_MOE_VARIANTS]  # Qwen2-MoE's MoE too
    if variants:
        raise invalid(
            "model",
            f"{', '.join(variants)}: tiersim measure builds GPT-2- and Llama-style layers only "
            "(and with --implementation huggingface Mixtral, Qwen2-MoE and DeepSeek-V3: "
            "latent attention, its mixture-of-experts; no q/k norms or post-norms yet)",
        )
    head_dim = m.head_dim or m.hidden // m.heads
    if m.position == "rope" and head_dim % 2:
        raise invalid("model.head_dim", f"rotary positions need an even head_dim, got {head_dim}")


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise invalid(
            "",
            "PyTorch is not installed: install the measure extra, "
            "pip install 'tiersim[measure]' (a pinned CPU build)",
        ) from None
    return torch
