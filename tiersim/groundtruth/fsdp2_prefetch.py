"""FSDP2's explicit prefetch in the recorded step (groundtruth/fsdp2_step.py, reused as it
is): `simulation.prefetch_depth` n > 1 under `framework: fsdp` is the pattern PyTorch's FSDP2
documents for prefetching further than its defaults (`FSDPModule.set_modules_to_forward_prefetch`
and `set_modules_to_backward_prefetch`, torch/distributed/fsdp/_fully_shard/_fully_shard.py):
each decoder layer i prefetches layers i + 1 .. i + n in its forward and i - 1 .. i - n (the
nearest first) in its backward; the root keeps FSDP2's default (the last layer's all-gather as
the backward starts). n = 1 is FSDP2 as it ships: nothing set.

fsdp2_step.py builds the model and calls `fully_shard` itself, then hands the named parameters
to a job's `make` to build the optimizer; `explicit_prefetch(name, n)` is such a `make`, which
also registers a global forward pre-hook (torch.nn.modules.module.register_module_forward_pre_hook,
public) that sets the layers' lists on the root's first call, before any layer's forward (a
global pre-hook runs before the module's own, FSDP2's among them), then removes itself: the
warm-up step and the recorded one both run with them.

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.distributed.fsdp import FSDPModule
from torch.nn.modules.module import register_module_forward_pre_hook

from tiersim.groundtruth import hfmodels
from tiersim.groundtruth.torchmodels import make_optimizer


def set_prefetch(root: Any, depth: int) -> None:
    """Each decoder layer of `root` prefetches the next `depth` layers in forward and the
    previous `depth` (the nearest first) in backward."""
    layers = list(hfmodels.layers_of(root))
    for i, layer in enumerate(layers):
        layer.set_modules_to_forward_prefetch(layers[i + 1 : i + 1 + depth])
        layer.set_modules_to_backward_prefetch(layers[max(0, i - depth) : i][::-1])


def explicit_prefetch(optimizer: str, depth: int) -> Callable[[list], Any]:
    """A `make` for fsdp2_step.record_fsdp_outcomes: the registry's `optimizer` for the named
    parameters, and the layers' explicit prefetch `depth` set as the root's forward begins."""

    def make(named: list) -> Any:
        def on_root(module: Any, args: Any) -> None:
            if isinstance(module, FSDPModule):  # the first FSDP module called: the root
                handle.remove()
                set_prefetch(module, depth)

        handle = register_module_forward_pre_hook(on_root)
        return make_optimizer(optimizer, named)

    return make
