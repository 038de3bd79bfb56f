"""The backward's rerun forward under torchtitan's op-level selective checkpointing
(`training.recompute: selective_op`; the policy: tiersim/state/op_recompute.py), timed kernel by
kernel as the layer's forward is (tiersim/workload/kernels.py): the mms the policy does not save
(wo and w3 of torchtitan 0.3.0's Llama block: every second one), at the linears' precision, and
every memory-bound kernel of the forward (norms, rotary, SiLU and the product, residual adds,
FP8 casts), none of which it saves. SDPA's outputs are saved: the attention core is not rerun.
"""

from __future__ import annotations

from typing import Protocol

from tiersim.state.model import Transformer
from tiersim.state.op_recompute import recomputed_matmuls


class LayerShape(Protocol):
    """What is read of a layer's per-GPU sizes (workload/kernels.py builds them)."""

    model: Transformer
    tokens: int
    t: int

    def linear(self, m: int, n: int, k: int) -> float: ...


def op_recompute_gemm_s(sh: LayerShape) -> float:
    """Seconds of the rerun mms: a column-parallel linear T x out/t (K = in), a row-parallel
    one T x out (K = in/t)."""
    total = 0.0
    for _, out, inner, row in recomputed_matmuls(sh.model):
        n, k = (out, max(1, inner // sh.t)) if row else (max(1, out // sh.t), inner)
        total += sh.linear(sh.tokens, n, k)
    return total
