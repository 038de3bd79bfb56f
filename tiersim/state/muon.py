"""Muon: torch.optim.Muon (torch/optim/_muon.py, after K. Jordan's muon.py): a momentum buffer
of the parameter's shape for 2-D matrices; Newton-Schulz runs `ns_steps` = 5 quintic
iterations on the bf16 update (m <= n after a transpose): X Xᵀ (2m²n FLOPs), A + A·A (2m³)
and B·X (2m²n) each. Embeddings, the output head and every 1-D parameter take AdamW (two
moments), as Muon's authors prescribe (torch.optim.Muon refuses non-2-D tensors). Of tiersim
this imports only leaves of the registry (state/optimizers.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tiersim.state import muon_sharded
from tiersim.state.optimizer_base import Collectives, Optimizer, Tensors, is_matrix, values_of

NS_STEPS = muon_sharded.NS_STEPS  # torch.optim.Muon's default ns_steps
newton_schulz_flops, largest_set = muon_sharded.newton_schulz_flops, muon_sharded.largest_set_bytes


def takes_muon(t: Tensors) -> bool:
    """Muon updates a layer's matrix; embeddings, the head and 3-D tensors go to AdamW."""
    return is_matrix(t) and not getattr(t, "embedding", False) and not getattr(t, "fused", False)


@dataclass(frozen=True)
class Muon(Optimizer):
    """Muon on the layers' 2-D matrices (one momentum buffer), AdamW (two moments) on the
    embeddings, the output head and every vector: `rest`, the registry's AdamW."""

    rest: Optimizer | None = None  # the optimizer of what Muon does not take (AdamW)

    @property
    def aux(self) -> Optimizer:
        """`rest`, which the registry always gives."""
        if self.rest is None:
            raise ValueError(f"{self.name} names no optimizer for the tensors it does not take")
        return self.rest

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        if not takes_muon(t):
            return self.aux.tensor_state_bytes(t, value_bytes)
        return (self.moments or 1) * values_of(t) * t.count * value_bytes

    def update_flops(self, tensors: Iterable[Tensors]) -> float:
        return sum(
            newton_schulz_flops(t.rows, t.cols) * t.count
            + self.flops_per_value * values_of(t) * t.count
            if takes_muon(t)
            else self.aux.flops_per_value * values_of(t) * t.count
            for t in tensors
        )

    def update_gemm_flops(self, tensors: Iterable[Tensors]) -> float:
        return sum(newton_schulz_flops(t.rows, t.cols) * t.count for t in tensors if takes_muon(t))

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
        # one matrix at a time (no foreach), state/muon_sharded.py: Nesterov's update
        # grad.lerp(buf) in the state's precision, its bf16 copy X (2 B), the Gram matrix and
        # its quintic update (2 x 2m²), the next X (2 B) and, where the CPU's bf16 GEMMs take
        # oneDNN (`cpu_gemm`), its packed copy of X; sharded over ranks, each matrix gathered
        # whole on every rank in turn, or its Gram matrix all-reduced, as its orientation has it.
        # The rest (embeddings, head, vectors, 3-D experts) is AdamW's, after Muon's step: the
        # larger of the two. Without the tensors, all are Muon's, at an upper bound of
        # value_bytes + 8 B per value of the largest (2m² <= 2mn).
        if not tensors:
            return (value_bytes + 8) * largest
        shapes = [t.linear_shapes() for t in tensors if takes_muon(t)]
        sets = (largest_set(s, shards, value_bytes, device, cpu_gemm) for s in shapes)
        muon = max(sets, default=0)
        rest = [t for t in tensors if not takes_muon(t)]
        # a 3-D tensor holds many of its rows x cols: the largest, `largest` (its fused size)
        whole = [math.ceil(values_of(t) / shards) for t in rest if not getattr(t, "fused", False)]
        fused = [largest for t in rest if getattr(t, "fused", False)]
        adamw = self.aux.step_temporary_bytes(
            math.ceil(sum(values_of(t) * t.count for t in rest) / shards),
            max(whole + fused, default=0),
            value_bytes,
            device,
        )
        return max(muon, adamw)

    @staticmethod
    def _sharded(tensors: Iterable[Tensors], shards: int):
        """(Newton-Schulz on one weight, how many such weights) for each layer matrix."""
        for t in tensors:
            if takes_muon(t):
                for out, inn, n in t.linear_shapes():
                    yield muon_sharded.ShardedNewtonSchulz(out, inn, shards), n

    def sharded_collectives(self, tensors: Iterable[Tensors], shards: int) -> Collectives:
        """Each matrix's, as DTensor runs them for its orientation (state/muon_sharded.py):
        the gathers of X and the Gram matrix (out <= in) or the Gram matrix's all-reduces (out
        > in), and X's norm's all-reduce."""
        calls: Counter = Counter()
        for ns, n in self._sharded(tensors, shards):
            for op, size, k in ns.collectives():
                calls[op, size] += k * n
        return tuple((op, size, k) for (op, size), k in calls.items())

    def whole_gemm_flops(self, tensors: Iterable[Tensors], shards: int) -> float:
        """A + A·A on the all-reduced Gram matrix of each out > in matrix, 2m³ an iteration."""
        return sum(ns.whole_flops() * n for ns, n in self._sharded(tensors, shards))

    def build(self, torch: Any, named: list[tuple[str, Any]], lr: float = 1e-4) -> list:
        """torch.optim.Muon on the layers' matrices, AdamW on the rest: embeddings, the head,
        vectors, a 1 x n matrix (Qwen2-MoE's shared-expert gate: a vector to Muon's authors and
        to tiersim's accounting, and one FSDP2 cannot step with Muon on more ranks than rows:
        `aten.add_.Tensor: in-place operations that require placement changes`) and tensors of
        3 dimensions (transformers 5's fused experts), which torch.optim.Muon refuses."""

        def takes(name: str, p: Any) -> bool:
            return p.ndim == 2 and min(p.shape) > 1 and not embedding_name(name)

        muon = [p for n, p in named if takes(n, p)]
        rest = [(n, p) for n, p in named if not takes(n, p)]
        return [torch.optim.Muon(muon, lr=lr), *self.aux.build(torch, rest, lr)]


EMBEDDING_NAMES = ("embed", "wte", "wpe", "lm_head", "pos")  # tiersim's and transformers'


def embedding_name(name: str) -> bool:
    """A parameter's name says it is an embedding or the output head."""
    return any(part in name for part in EMBEDDING_NAMES)
