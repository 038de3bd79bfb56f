"""8-bit AdamW: bitsandbytes' block-wise 8-bit AdamW (Dettmers et al. 2022; bitsandbytes
0.50.2, whose CPU backend `measure` runs), optim/optimizer.py Optimizer2State.init_state:
`state1`, `state2` uint8 of the parameter's shape and, block-wise, `absmax1`, `absmax2` fp32 of
ceil(n / 256) values each; a tensor of fewer than `min_8bit_size` = 4096 values keeps 32-bit
(fp32) state1 and state2 instead. On FSDP2's DTensors, which bitsandbytes refuses, torchao's
AdamW8bit (state/torchao_adamw8bit.py). Of tiersim this imports only leaves of the registry.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tiersim.state import torchao_adamw8bit
from tiersim.state.optimizer_base import FP32, Optimizer, Tensors, values_of

BNB_BLOCK = 256  # bitsandbytes' block-wise quantisation block (Optimizer2State.init_state)
BNB_MIN_8BIT = 4096  # min_8bit_size: smaller tensors keep 32-bit state


@dataclass(frozen=True)
class AdamW8bit(Optimizer):
    """bitsandbytes' AdamW8bit (the `measure` extra installs bitsandbytes, whose CPU backend
    runs it); on FSDP2's DTensors, which bitsandbytes refuses, torchao's (the extra installs
    torchao; state/torchao_adamw8bit.py): its state decided on the rank's shard, its eager
    update's transients."""

    @property
    def measurable(self) -> bool:
        return True

    @property
    def own_state_precision(self) -> str:
        return (
            "keeps its two states in 8 bits (bitsandbytes' uint8 states with an fp32 scale a "
            "block of 256 values; a tensor under 4,096 values in fp32)"
        )

    @property
    def reported_apart(self) -> str:
        return "scalar step counters and the two 256-value quantisation maps all tensors share"

    def missing(self, dtensors: bool = False) -> str | None:
        package = "torchao" if dtensors else "bitsandbytes"
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed: pip install 'tiersim[measure]'"
        return None

    def dtensor_refusal(self, dtype: str) -> str | None:
        if dtype == "fp32":
            return None
        return "torchao's AdamW8bit (0.18.0), the one that steps DTensors, refuses 16-bit ones"

    def build(self, torch: Any, named: list[tuple[str, Any]], lr: float = 1e-4) -> list:
        params = [p for _, p in named]
        from torch.distributed.tensor import DTensor

        if any(isinstance(p, DTensor) for p in params):
            if self.missing(dtensors=True):
                raise ValueError(self.missing(dtensors=True))
            return [torchao_adamw8bit.build_for_dtensors(torch, params, lr)]
        try:
            import bitsandbytes
        except ImportError:
            raise ValueError(self.missing() or "bitsandbytes does not import") from None
        return [bitsandbytes.optim.AdamW8bit(params, lr=lr)]

    def step_temporary_bytes(
        self,
        values: int,
        largest: int,
        value_bytes: int,
        device: str,
        tensors: Sequence = (),
        shards: int = 1,
        dtensors: bool = False,
        cpu_gemm: str = "onednn",
    ) -> int:
        """CUDA's blockwise kernel updates in place; the CPU backend (backends/cpu/ops.py,
        _optimizer_update_8bit_blockwise_cpu) works one tensor at a time in fp32: both moments
        dequantized (4 + 4 B a value), the gradient upcast and scaled (4), a 16-bit
        parameter's fp32 copy (4), and sqrt(v) beside sqrt(v) / c (4 + 4). On DTensors,
        torchao's eager update, one local shard at a time."""
        if device != "cpu":
            return 0
        if dtensors and tensors:
            return torchao_adamw8bit.update_bytes(tensors, shards, largest, value_bytes)
        return (20 + (FP32 if value_bytes != FP32 else 0)) * largest

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        n = values_of(t)
        if n < BNB_MIN_8BIT:
            return 2 * n * FP32 * t.count
        return (2 * n + 2 * FP32 * math.ceil(n / BNB_BLOCK)) * t.count

    def dtensor_state_bytes(
        self, tensors: Iterable[Tensors], value_bytes: int, shards: int
    ) -> int | None:
        return torchao_adamw8bit.shards_state_bytes(tensors, value_bytes, shards)
