"""Megatron-LM's flags that change what the loss and the FP8 weights keep, onto the scenario:

- --cross-entropy-loss-fusion with --cross-entropy-fusion-impl (native | te; absent: native,
  TransformerConfig's `cross_entropy_fusion_impl: str = "native"`) -> training.loss_fusion;
  without the fusion flag the loss is vocab_parallel_cross_entropy (training.loss_fusion: none);
- --fp8-param-gather -> training.fp8.param_gather (read where --fp8-format makes training.fp8).
"""

from __future__ import annotations

from typing import Protocol

from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import text

FUSION_IMPLS = ("native", "te")


class Flags(Protocol):
    def has(self, name: str) -> bool: ...

    def value(self, name: str) -> str | None: ...


def loss_fusion(args: Flags, out: Mapped) -> None:
    """training.loss_fusion from the cross-entropy flags."""
    impl = args.value("cross-entropy-fusion-impl")
    if impl is not None:
        text("--cross-entropy-fusion-impl", impl, FUSION_IMPLS)
    if not args.has("cross-entropy-loss-fusion"):
        if impl is not None:
            why = "has no effect without --cross-entropy-loss-fusion: training.loss_fusion: none"
            out.note("--cross-entropy-fusion-impl", f"{impl}: {why}")
        return
    out.put("training.loss_fusion", impl or "native", "--cross-entropy-loss-fusion")
    if impl is None:
        why = (
            "absent: Megatron-Core's default, native (fused_cross_entropy.py, which keeps the "
            "fp32 softmax as the unfused loss does): training.loss_fusion: native"
        )
        out.note("--cross-entropy-fusion-impl", why)


def fp8_settings(args: Flags, recipe: str) -> dict[str, object]:
    """training.fp8 from the recipe and --fp8-param-gather."""
    return {"recipe": recipe, **({"param_gather": True} if args.has("fp8-param-gather") else {})}
