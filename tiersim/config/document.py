"""A validated scenario written back out whole: every value, defaults included, quantities with
units, so the file reproduces the run even after presets or defaults change.

`scenario_document(s)` loads back (tiersim.config.load.build) to a scenario equal to `s` but for
`model.preset`, `model.hf_config` and `hardware.preset`: their values are all written out, so
the document names them in `provenance` comments only (`hardware.preset: none`); a default
`training.seq_len` is written as the length it resolved to; and with a `training.framework`,
each `training.offload` key left out is written as the framework's default it resolved to
(tiersim.config.framework), its attention kernel on this GPU
(tiersim.config.framework_attention) and its vocabulary divisor (tiersim.config.vocab_padding),
so the file says what the run did and reruns it the same.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel

from tiersim.config.deepspeed import OFFLOAD_ALIASES
from tiersim.config.framework import offload_plan, resolved_prefetch_depth
from tiersim.config.framework_attention import resolved_flash_kernel
from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.kernel_workspace import resolved_workspace
from tiersim.config.schema import Offload, Scenario, unit_kind
from tiersim.config.vocab_padding import vocab_divisor
from tiersim.core.units import Kind, fmt_exact

SOURCES = (("model", "preset"), ("model", "hf_config"), ("hardware", "preset"))


def scenario_document(s: Scenario) -> dict[str, Any]:
    """Every field of `s` as YAML-ready values, without the preset / config.json references."""
    doc = _model(s)
    doc["training"]["seq_len"] = s.seq_len  # the default resolved: the model's max_positions
    doc["training"]["flash_kernel"] = resolved_flash_kernel(s)  # the framework's, on this GPU
    doc["training"]["make_vocab_size_divisible_by"] = vocab_divisor(s)  # megatron's 128
    doc["training"]["workspace"] = fmt_exact(resolved_workspace(s), Kind.SIZE)  # the stack's
    if s.training.global_batch_size is not None:  # derived from it (config/batch.py)
        doc["training"].pop("grad_accumulation")
    # Megatron-LM refuses every offload key (config/consistency.py): nothing to resolve
    if s.training.framework not in (None, "megatron"):
        doc["training"]["offload"] = _model(resolved_offload(s))
    doc["parallel"] = _model(resolved_parallel(s))  # the framework's overlap defaults resolved
    doc["simulation"]["prefetch_depth"] = resolved_prefetch_depth(s)  # and its prefetch depth
    for section, key in SOURCES:
        doc[section].pop(key, None)
    # every value is here: no preset under them (an absent one would mean the default preset)
    doc["hardware"] = {"preset": "none", **doc["hardware"]}
    budget = doc["budget"]  # as documented: budget.<tier> beside steps_per_day
    doc["budget"] = {"steps_per_day": budget["steps_per_day"], **budget["tiers"]}
    extras = (("", "plan"), ("hardware", "price_per_gpu_hour"), ("hardware", "amortization"))
    for section, key in extras:  # optional extras
        where = doc[section] if section else doc
        if where.get(key) is None:
            where.pop(key, None)
    for tier in doc["hardware"]["tiers"].values():  # a tier's price, where given
        if tier.get("price_per_gb") is None:
            tier.pop("price_per_gb", None)
    return doc


def resolved_offload(s: Scenario) -> Offload:
    """`training.offload` with every key its framework left to its default filled in; null
    where the framework has no such thing (FSDP2's swap buffers, a generic engine's buckets,
    DeepSpeed's overlap_comm under another framework)."""
    plan = offload_plan(s)
    values = {key: getattr(plan, key) for key in Offload.model_fields}
    if values["buffer_count"] == 0:  # no swap buffers: the schema's count starts at 1
        values["buffer_count"] = None
    for key in OFFLOAD_ALIASES.values():  # DeepSpeed's 0 (no prefetch) is kept under its own
        if values[key] == 0:  # training.deepspeed.stage3_* key: the older name starts at 1
            values[key] = None
    if plan.framework != "deepspeed":  # DeepSpeed's key: as given (null), not a made-up true
        values["overlap_comm"] = s.training.offload.overlap_comm
    return Offload(**values)


def provenance(s: Scenario) -> list[str]:
    """Where the dimensions and the hardware came from, for a comment above the document."""
    lines = []
    for section, key in SOURCES:
        value = getattr(getattr(s, section), key)
        if value is not None:
            lines.append(f"{section}.{key}: {value}")
    return lines


def _model(model: BaseModel) -> dict[str, Any]:
    out = {}
    for name, field in type(model).model_fields.items():
        kind = unit_kind(field.annotation, field.metadata)
        out[name] = _value(getattr(model, name), field.annotation, kind)
    return out


def _value(value: Any, annotation: Any, kind: Kind | None) -> Any:
    if isinstance(value, BaseModel):
        return _model(value)
    if isinstance(value, dict):
        key, inner = _dict_annotations(annotation)
        key_kind, inner_kind = unit_kind(key), unit_kind(inner)
        return {_value(k, key, key_kind): _value(v, inner, inner_kind) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_value(v, None, None) for v in value]
    if kind is not None and isinstance(value, float | int) and not isinstance(value, bool):
        return fmt_exact(float(value), kind)
    return value


def _dict_annotations(annotation: Any) -> tuple[Any, Any]:
    """(key, value) annotations of a mapping field (keys with units: a size curve)."""
    for candidate in (annotation, *get_args(annotation)):
        if get_origin(candidate) is dict:
            return get_args(candidate)
    return None, None
