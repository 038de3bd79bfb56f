"""`training.recompute` in transformers' models, as `measure` runs it.

`selective`: Korthikanti et al.'s selective recompute (§5) checkpoints the attention core (the
s x s scores, softmax and the product with V) and recomputes it in backward; the projections,
norms and MLP keep what they keep. Here the model's attention function (transformers'
`ALL_ATTENTION_FUNCTIONS`: `sdpa`, or the model's own `eager_attention_forward`) runs inside
torch.utils.checkpoint (non-reentrant), registered as an attention implementation of its own
with the base kernel's mask function, and set on the model's config. `full`: transformers' own
layer checkpointing, each layer's checkpoint function `held_checkpoint` below.

What a non-reentrant checkpoint holds (torch 2.13, torch/utils/checkpoint.py): its positional
tensor inputs, saved as autograd saves any tensor (`_CheckpointFrame.save_inputs`, through the
saved-tensor hooks in force); nothing the function saves inside (`_checkpoint_hook`'s
`pack_hook` returns an empty `_Holder`: recomputed in backward, a kernel's log-sum-exp as
well); and, outside autograd's saved tensors, whatever its `recompute_fn` closes over: the
keyword arguments (`fn(*args, **kwargs)`) and, for transformers' layers, the keywords bound in
`partial(forward, self, **kwargs)` (transformers/modeling_layers.py): the rotary cos and sin,
the position ids. `held_checkpoint` saves those too through a no-op autograd function kept as
long as the checkpoint, so that saved-tensor hooks (a measurement's) see every tensor a
checkpoint holds; the memory is the same (the closure holds them either way).

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import torch
from torch.utils import _pytree
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

SELECTIVE = "tiersim_selective_{}"  # the registered name, per base kernel


class _SaveHeld(torch.autograd.Function):
    """Saves its tensors as autograd saves any (the hooks in force see them); its output, a
    0-element tensor, keeps the node and so the saved tensors alive while it is referenced."""

    @staticmethod
    def forward(ctx: Any, dummy: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*tensors)
        return dummy.detach().clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return (None,) * (1 + len(ctx.saved_tensors))


def _closed_over(fn: Any, kwargs: dict) -> list[torch.Tensor]:
    bound = (fn.args, fn.keywords) if isinstance(fn, partial) else ()
    leaves = _pytree.tree_leaves((bound, kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def held_checkpoint(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.utils.checkpoint (non-reentrant) of `fn`, the tensors its recompute closes over
    (keyword arguments, a partial's bound ones) saved alongside for as long as it lives."""
    held = _closed_over(fn, kwargs)
    if held and torch.is_grad_enabled():
        dummy = torch.empty(0, requires_grad=True)
        keep = _SaveHeld.apply(dummy, *held)
        fn = partial(fn)  # a wrapper of its own, closed over by the checkpoint's recompute
        fn.keep = keep  # type: ignore[attr-defined]
    return checkpoint(fn, *args, use_reentrant=False, **kwargs)


def _core(kernel: str):
    def core(module: Any, *args: Any, **kwargs: Any):
        own = sys.modules[type(module).__module__].eager_attention_forward
        fn = ALL_ATTENTION_FUNCTIONS.get_interface(kernel, own)
        # the checkpoint's inputs (q, k, v, the mask) are kept; what the core saves is not
        return held_checkpoint(fn, module, *args, **kwargs)

    return core


def recompute_attention_core(net: Any) -> None:
    """Checkpoint every layer's attention core of `net` (transformers' model, built with
    `_attn_implementation` 'eager' or 'sdpa')."""
    kernel = net.config._attn_implementation
    name = SELECTIVE.format(kernel)
    AttentionInterface.register(name, _core(kernel))
    # the base kernel's mask (eager's causal one); a name without a mask function gets none
    # (masking_utils `_preprocess_mask_arguments`), and eager attention would see every key
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[kernel])
    net.config._attn_implementation = name


def recompute_layers(net: Any) -> None:
    """transformers' layer checkpointing on `net`, each layer's checkpoint `held_checkpoint`."""
    if hasattr(net, "activation_checkpointing_enable"):  # its name in later transformers 5
        net.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    else:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for module in net.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            module._gradient_checkpointing_func = held_checkpoint


def set_recompute(net: Any, recompute: str, kernel: str) -> None:
    """`training.recompute` on the built model, whatever was set before: `full` each layer's
    input kept and the layer recomputed (transformers' checkpointing flag on the layers, read
    at each call), `selective` the attention core recomputed (`recompute_attention_core`),
    `none` neither; `kernel` the attention implementation the model was built with."""
    net.config._attn_implementation = kernel
    if recompute == "full":
        recompute_layers(net)
    elif hasattr(net, "activation_checkpointing_disable"):  # the layers' flags cleared
        net.activation_checkpointing_disable()
    else:
        net.gradient_checkpointing_disable()
    if recompute == "selective":
        recompute_attention_core(net)
