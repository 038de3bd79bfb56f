"""The inventory for people: each class's bytes (whole model, per GPU, the routed experts' part),
where it lives, the largest activation tensors, each tier's fit.

Reads only the scenario and the inventory (and the host's memory timeline, given), never the
engine.
"""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.config.vocab_padding import padding_note
from tiersim.core.units import fmt_bytes, fmt_count
from tiersim.report.host_memory import host_section, host_text
from tiersim.report.inventory_note import GPU_GRADIENTS, inflight_text, split_note
from tiersim.report.memory import timeline_section, timeline_text
from tiersim.report.table import render
from tiersim.state.activations import accounting_for
from tiersim.state.classes import NAMES, zero_sharded
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.inventory import Inventory, activation_items
from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import resolve


def _class_rows(s: Scenario, inv: Inventory) -> tuple[list[str], list[list[str]]]:
    """One row per class: whole model, per GPU (for an MoE model, also its two parts: the routed
    experts' state and the rest), sharded, home."""
    home_of = homes(s.placement, s.hardware)
    expert_home, experts = expert_homes(s.placement, s.hardware), inv.experts_per_gpu

    def split(cls: str | None) -> list[str]:
        if experts is None:
            return []
        whole = inv.per_gpu.total if cls is None else inv.per_gpu[cls]
        routed = experts.total if cls is None else experts[cls]
        return [fmt_bytes(whole - routed), fmt_bytes(routed)]

    rows = [
        [
            cls,
            fmt_bytes(inv.dense[cls]),
            fmt_bytes(inv.per_gpu[cls]),
            *split(cls),
            _sharded(inv, cls),
            home_of[cls]
            + (f" (experts: {expert_home[cls]})" if expert_home[cls] != home_of[cls] else ""),
        ]
        for cls in NAMES
    ]
    if inv.per_gpu.gpu_gradients:  # DeepSpeed ZeRO-1's CPU optimizer: the whole on the GPU too
        on_gpu = fmt_bytes(inv.per_gpu.gpu_gradients)
        routed = [] if experts is None else [experts.gpu_gradients]
        parts = [fmt_bytes(n) for n in (inv.per_gpu.gpu_gradients - sum(routed), *routed)]
        row = [GPU_GRADIENTS, "", on_gpu, *(parts if experts else []), "no", s.hardware.gpu.memory]
        rows.insert(NAMES.index("gradients") + 1, row)
    rows.append(["total", fmt_bytes(inv.dense.total), fmt_bytes(inv.per_gpu.total)])
    rows[-1] += [*split(None), "", ""]
    parts = ["per GPU: other", "per GPU: experts"] if experts is not None else []
    # "whole model", not the JSON's "dense": an MoE model's dense layers are another thing;
    # "ZeRO-sharded": tensor and pipeline parallelism split a class that ZeRO does not shard
    return ["class", "whole model", "per GPU", *parts, "ZeRO-sharded", "home"], rows


def _sharded(inv: Inventory, cls: str) -> str:
    """The ZeRO-sharded column: DeepSpeed ZeRO-1's CPU optimizer keeps the gradients' partition
    on the host (the per-GPU column's bytes) and the whole 16-bit gradients on the GPU
    (state/zero1_offload.py), where `inv.sharded`, the GPU's rule, says no."""
    if cls == "gradients" and inv.per_gpu.gpu_gradients:
        return "host: yes"
    return "yes" if inv.sharded.get(cls) else "no"


def _context(s: Scenario) -> str:
    """', context 16 (all_gather)' where context parallelism splits the sequence."""
    par = s.parallel
    return f", context {par.context} ({par.context_comm})" if par.context > 1 else ""


def inventory_tables(s: Scenario, inv: Inventory, host: HostTimeline | None = None) -> str:
    """The inventory's tables and notes; `host`: the host's memory timeline, where the step
    uses host memory (engine/host_memory.py, built by the caller)."""
    columns, rows = _class_rows(s, inv)
    par = s.parallel
    vocab = padding_note(s)  # the tokenizer's vocabulary and the framework's padded one
    head = (
        f"{s.name}: {fmt_count(inv.parameters)} parameters ({inv.parameters:,}"
        f"{'; ' + vocab if vocab else ''}); "
        f"per GPU = stage {inv.stage} of pipeline {par.pipeline:,}, tensor {par.tensor:,}, "
        f"data {par.data:,}{_context(s)}{_experts(s)}, {_sharding(s, inv)}; "
        f"{inflight_text(inv)}"
    )
    classes = render(columns, rows, head)
    tier_rows = [
        [
            name,
            fmt_bytes(u.resident_bytes),
            fmt_bytes(u.capacity_bytes),
            f"{100 * u.resident_bytes / u.capacity_bytes:,.1f} %",
            "yes" if u.fits else "NO",
        ]
        for name, u in inv.tiers.items()
    ]
    tiers = render(["tier", "resident", "capacity", "used", "resident fits"], tier_rows)
    tiers += "\n\n" + timeline_text(timeline_section(resolve(s), inv))
    if host is not None:  # the host's timeline, where the step puts anything there
        tiers += "\n\n" + host_text(host_section(host))
    acts = _activation_table(s, inv)
    notes = [
        split_note(s, inv),
        "Resident state, and the GPU's and host's step timelines, each with its verdict "
        "(docs/memory.md); `tiersim run` adds each tier's occupancy as the simulated step "
        "moves state (chunks staged in flight, prefetched units, checkpoint versions on "
        "their target) and says whether that fits.",
    ]
    if s.model.parameters is not None and s.model.activation_bytes_per_layer is None:
        notes.append(
            f"Activations are 0 B: {_generic_origin(s)}; give model.activation_bytes_per_layer."
        )
    return f"{classes}\n\n{acts}{tiers}\n\n" + "\n".join(notes)


def _generic_origin(s: Scenario) -> str:
    """Why the model has no shapes: its hf_config's model_type was counted by transformers, or
    the scenario gave it as a parameter count."""
    if s.model.hf_config is not None:
        return (
            "the hf_config's model_type is none of the named families, so transformers counted "
            "its parameters and it runs as a generic model, with no dimensions to derive them from"
        )
    return "a generic model (model.parameters) has no dimensions to derive them from"


def _activation_table(s: Scenario, inv: Inventory, top: int = 6) -> str:
    """The largest activation tensors per GPU (all of them: `inventory --format json`)."""
    items = activation_items(resolve(s), inv)
    total = sum(i.per_gpu_bytes for i in items)
    if not total:
        return ""
    rows = [
        [i.name, i.group, fmt_bytes(i.per_gpu_bytes), _pct(i.per_gpu_bytes, total)]
        for i in items[:top]
    ]
    acc = accounting_for(s)
    n = len(items)
    which = f"largest {top} of {n} tensor kinds" if n > top else f"all {n} tensor kinds"
    which = "1 tensor kind" if n == 1 else which
    head = (
        f"activations per GPU, {which} ({acc.implementation}, "
        f"{acc.kernel} attention, attention dropout {acc.attention_dropout:g}, hidden dropout "
        f"{acc.hidden_dropout:g}, {acc.compute_bytes}-byte values)"
    )
    return render(["tensor", "group", "per GPU", "share"], rows, head) + "\n\n"


def _experts(s: Scenario) -> str:
    """', expert 8 (8 of 64 routed experts per GPU)' under expert parallelism."""
    e, experts = s.parallel.expert, s.model.experts
    if experts is None:
        return ""
    routed = f"{experts // e} of {experts} routed experts per GPU"
    return f", expert {e} ({routed})" if e > 1 else f" ({routed})"


def _sharding(s: Scenario, inv: Inventory) -> str:
    """'ZeRO 2', or with per-class overrides what is sharded in fact: 'ZeRO 0 + weights'."""
    stage = s.parallel.zero_stage
    by_stage = set(zero_sharded(stage))
    actual = {c for c, on in inv.sharded.items() if on}
    if actual == by_stage:
        return f"ZeRO {stage}"
    added, dropped = sorted(actual - by_stage), sorted(by_stage - actual)
    return f"ZeRO {stage}" + "".join(f" + {c}" for c in added) + "".join(f" - {c}" for c in dropped)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"
