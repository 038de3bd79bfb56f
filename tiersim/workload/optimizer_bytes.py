"""The elementwise bytes a GPU optimizer step moves beyond the update itself."""

from __future__ import annotations

from tiersim.config.schema import PRECISION_BYTES
from tiersim.state.inventory import master_bytes
from tiersim.state.resolved import Resolved


def mixed_precision_bytes(r: Resolved, params: float) -> float:
    """Elementwise bytes a GPU optimizer step moves beyond the update itself when it keeps a
    master copy (Megatron-LM's fp16/bf16 optimizer, per parameter): the gradient copied to
    fp32 (read g, write 4), unscaled (8), its norm taken (4), clipped (8), the new weights
    copied back (read 4, write w) and the gradient buffer zeroed (g)."""
    prec = r.execution.training.precision
    if not master_bytes(prec):
        return 0.0
    g, w = PRECISION_BYTES[prec.gradients], PRECISION_BYTES[prec.weights]
    return params * (g + 4 + 8 + 4 + 8 + 4 + w + g)
