"""The run table's sentences about offload: what a framework fetched, tiled and moved (the
report's `offload` section in words)."""

from __future__ import annotations

from typing import Any

from tiersim.config.framework import default_prefetch_depth
from tiersim.core.units import fmt_bytes, fmt_time

_FRAMEWORKS = {"deepspeed": "DeepSpeed", "fsdp": "FSDP2", "megatron": "Megatron-LM"}


def _params(n: int) -> str:
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M"


def tiling_line(off: dict[str, Any]) -> str:
    """The tiled operators in words: each a fetched part of every layer (L0.k, the k-th of
    layer 0's, from 0), and the step against the same operators whole (faster or slower)."""
    parts = off["fetch_parts_per_layer"]
    ops = ", ".join(
        f"{t['operator']} ({_params(t['parameters'])} parameters) in {t['tiles']} tiles"
        for t in off["tiling"]
    )
    cost = off["tiling_cost_s"]
    effect = f"costs {fmt_time(cost)} a step" if cost >= 0 else f"saves {fmt_time(-cost)} a step"
    return (
        f"memory-centric tiling (every layer alike; L0.k: the k-th of a layer's {parts} "
        f"fetched parts, from 0): {ops}; it {effect}, against the same operators whole on a "
        "GPU memory that holds them"
    )


_FSDP_GRADIENTS = "gradients offloaded to the host every micro-batch and added there"


def _gradient_path(off: dict[str, Any]) -> str:
    """DeepSpeed's gradients on their way to a CPU optimizer, in words."""
    grads = "fp32" if off["boundary_gradients"] == "fp32" else "stored-precision"
    text = f"{grads} gradients to the CPU optimizer at the accumulation boundary"
    if off["swap_gradients"]:
        text += ", through NVMe with the optimizer state"
    if off["overlap_comm"] is False:  # None: not in force (off at ZeRO-3, not modelled)
        text += " (overlap_comm off: the gradient copies run on the compute stream)"
    return text


def _fetches(off: dict[str, Any]) -> str:
    """How weights were fetched, counted in fetches a layer: a tile is a fetch of its own,
    and a submodule (or a bucket of small ones) cut into tiles is one part of the layer."""
    if not off.get("weights_streamed", True):
        return "weights kept whole in GPU memory, nothing fetched"
    per, parts = off["fetch_units_per_layer"], off["fetch_parts_per_layer"]
    largest = f"the largest {_params(off['largest_fetch_parameters'])} parameters a fetch"
    if off.get("fetch") == "model":  # FSDP2's one unit (workload/whole_model.py)
        return (
            "parameters fetched as FSDP2's one unit over the whole model: one all-gather of "
            "every parameter before each forward (again before the backward under "
            "parallel.reshard_after_forward: true) and one reduce-scatter of every gradient "
            "after each backward, none hidden under computation"
        )
    if parts == 1:
        tiles = f", each layer in {per:,} tiles ({per:,} fetches a layer)" if per > 1 else ""
        return f"parameters fetched a layer at a time{tiles}, {largest}"
    tiled = len(off["tiling"])
    cut = f" ({parts:,} submodule fetches, {tiled:,} of them cut into tiles)" if tiled else ""
    return (
        "parameters fetched per submodule (consecutive small ones bucketed together): "
        f"{per:,} fetches a layer{cut}, {largest}"
    )


def _cut(off: dict[str, Any], name: str, depth: int, configured: int) -> str:
    """A depth below the one configured, and why (review (k): 'prefetch depth 0
    (simulation.prefetch_depth; DeepSpeed's default 2)' read as a setting of 0 nobody made)."""
    default = default_prefetch_depth(off["framework"])
    setting = f"simulation.prefetch_depth {configured}" + (
        f", {name}'s default" if configured == default else ""
    )
    room = "the prefetched units that fit in the GPU memory left"
    if off["framework"] == "deepspeed":
        room = (
            f"the fetches of up to {_params(off['largest_fetch_parameters'])} parameters that "
            "fit in the values DeepSpeed keeps gathered ahead (training.deepspeed."
            "stage3_prefetch_bucket_size, stage3_max_live_parameters: docs/zero3-prefetch.md) "
            "and in the GPU memory left"
        )
    return f"prefetch depth {depth} ({setting}, cut to {room})"


def _prefetch(framework: str, name: str, depth: int) -> str:
    """How far ahead a fetch is issued (`simulation.prefetch_depth`), and whether that is the
    framework's default: a `--set simulation.prefetch_depth=2` moved the figures unsaid."""
    default = default_prefetch_depth(framework)
    if depth == default:
        return f"prefetch depth {depth} (simulation.prefetch_depth, {name}'s default)"
    more = ""
    if framework == "fsdp" and depth > default:  # FSDP2's explicit prefetch (framework.py)
        extra = depth - default
        buffers = f"{extra} all-gather buffer{'s' if extra != 1 else ''}"
        more = f": FSDP2's explicit prefetch, {buffers} more in each layer's backward"
    return f"prefetch depth {depth} (simulation.prefetch_depth; {name}'s default {default}){more}"


def offload_line(
    off: dict[str, Any], cpu_update: bool, depth: int | None = None, configured: int | None = None
) -> str:
    """How the scenario's framework moved state (the report's `offload` section), in words;
    `depth` the run's prefetch depth (the report's `sim.prefetch_depth`), `configured` the
    one set or defaulted where the run cut it (`sim.prefetch_depth_configured`)."""
    name = _FRAMEWORKS.get(off["framework"], off["framework"])
    parts = [_fetches(off)]
    parts.append("operators tiled as said above" if off["tiling"] else "no operator tiled")
    if depth is not None and off.get("weights_streamed", True):
        if configured is not None and configured > depth:
            parts.append(_cut(off, name, depth, configured))
        else:
            parts.append(_prefetch(off["framework"], name, depth))
    deepspeed = off["framework"] == "deepspeed"
    if cpu_update:
        parts.append(_gradient_path(off) if deepspeed else _FSDP_GRADIENTS)
    if deepspeed:  # PyTorch's optimizers step whole tensors: no tiles to say
        tiles = off["optimizer_tiles"]
        parts.append(
            f"the optimizer steps {tiles:,} sub-group{'s' if tiles != 1 else ''} of up to "
            f"{_params(off['optimizer_tile_parameters'])} parameters"
        )
    if off["pinned_host_extra_bytes"]:
        extra = fmt_bytes(off["pinned_host_extra_bytes"])
        parts.append(f"host memory {extra} beyond the state (buffers, pinned blocks' rounding)")
    return f"Offload as {name} moves state (training.framework): {'; '.join(parts)}."
