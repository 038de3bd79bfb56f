"""The least GPU memory a step can stream through: the workspace, one unit's full weights and
gradients and one micro-batch of one layer's activations, even with every class homed off the
GPU. A GPU smaller than that cannot run the step at all (exit 3), and the refusal says what
sets it: the stage's rest (embeddings, final norm, output head) where a large vocabulary
makes its weights and gradients the largest unit's and the largest part; else a layer's."""

from __future__ import annotations

from tiersim.core.units import fmt_bytes
from tiersim.workload.work import Workload


def streaming_minimum(wl: Workload, workspace: int) -> int:
    """GPU memory that streaming layer by layer needs even with every class homed elsewhere:
    the workspace (the inventory's), one unit's full weights and gradients, one micro-batch
    of one layer's activations."""
    big_w = max(u.weights_full for u in wl.units)
    big_g = max(u.gradients_full for u in wl.units)
    big_a = max(u.activations for u in wl.units)
    return workspace + big_w + big_g + big_a


def too_small(wl: Workload, workspace: int, capacity: float) -> str | None:
    """Why a GPU of `capacity` bytes cannot run the step, or None where it can."""
    need = streaming_minimum(wl, workspace)
    if need <= capacity:
        return None
    head = f"GPU memory ({fmt_bytes(capacity)}) cannot hold even one"
    largest = max(wl.units, key=lambda u: u.weights_full + u.gradients_full)
    held = largest.weights_full + largest.gradients_full
    acts = max(u.activations for u in wl.units)
    if largest.name == "rest" and held > max(workspace, acts):  # the embeddings' own part
        state = fmt_bytes(held)
        return (
            f"{head} unit's working set ({fmt_bytes(need)}: workspace {fmt_bytes(workspace)} "
            f"+ the largest unit's weights and gradients, the embeddings and output head's "
            f"{state}, + one layer's activations); lower model.vocab or the micro-batch size "
            "or sequence length, or add tensor parallelism (it splits the vocabulary)"
        )
    return (
        f"{head} layer's working set ({fmt_bytes(need)}: workspace {fmt_bytes(workspace)} + one "
        "layer's weights, gradients and activations); lower the micro-batch size or sequence "
        "length, recompute, or add tensor/sequence parallelism"
    )
