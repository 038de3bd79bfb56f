"""The word embedding's dense gradient under Megatron's implementation, every micro-batch, for
the kernel time model (tiersim/workload/kernels.py, the first stage's embedding backward).

Megatron-Core's VocabParallelEmbedding looks its rows up with `F.embedding` (sparse=False), whose
backward (ATen's embedding_dense_backward) allocates the whole gradient of this GPU's
ceil(V/t) x h table as zeros and sums the tokens' rows into it; the gradient hook then adds it
into the step's gradient buffer (Megatron-Core DDP's `param.main_grad.add_(param.grad.data)`;
NeMo's apex DistributedFusedAdam adds it into its bucket alike). Bytes per table value: the
zeros written 2, the gradient read 2, the buffer read and written at the gradients' precision
(2 B each bf16, 4 B fp32): 8 B (bf16 buffer) or 12 B (fp32). The tokens' own rows (T x h) are
the embedding's 16 B per hidden element already counted there. Other implementations are left
as they were (their runs' fitted constants were fitted without it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES

if TYPE_CHECKING:
    from tiersim.state.model import Transformer
    from tiersim.state.resolved import Resolved

ZEROS_B = GRAD_READ_B = 2.0  # the 16-bit gradient: written as zeros, read by the hook's add


def dense_gradient_bytes(r: Resolved, model: Transformer) -> float:
    """Bytes the embedding's dense gradient and its accumulation move in one micro-batch's
    backward on the first stage (0 outside Megatron's implementation)."""
    if r.accounting.implementation != "megatron":
        return 0.0
    values = math.ceil(model.vocab / r.execution.parallel.tensor) * model.hidden
    buffer = PRECISION_BYTES[r.execution.training.precision.gradients]
    return values * (ZEROS_B + GRAD_READ_B + 2 * buffer)
