"""`training.recompute: selective` in transformers' models: Korthikanti et al.'s selective
recompute (§5) checkpoints the attention core (the s x s scores, softmax and the product with
V) and recomputes it in backward; the projections, norms and MLP keep what they keep. Here the
model's attention function (transformers' `ALL_ATTENTION_FUNCTIONS`: `sdpa`, or the model's own
`eager_attention_forward`) runs inside torch.utils.checkpoint (non-reentrant), registered as an
attention implementation of its own and set on the model's config.

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

import sys
from typing import Any

from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

SELECTIVE = "tiersim_selective_{}"  # the registered name, per base kernel


def _core(kernel: str):
    def core(module: Any, *args: Any, **kwargs: Any):
        own = sys.modules[type(module).__module__].eager_attention_forward
        fn = ALL_ATTENTION_FUNCTIONS.get_interface(kernel, own)
        # the checkpoint's inputs (q, k, v, the mask) are kept; what the core saves is not
        return checkpoint(fn, module, *args, use_reentrant=False, **kwargs)

    return core


def recompute_attention_core(net: Any) -> None:
    """Checkpoint every layer's attention core of `net` (transformers' model, built with
    `_attn_implementation` 'eager' or 'sdpa')."""
    kernel = net.config._attn_implementation
    name = SELECTIVE.format(kernel)
    AttentionInterface.register(name, _core(kernel))
    net.config._attn_implementation = name
