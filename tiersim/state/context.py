"""What context parallelism keeps on one rank beyond 1/c of the activations
(tiersim/state/inventory.per_context_rank): the K/V a layer exchanges, and under
`context_comm: all_gather` the whole sequence's K/V of one layer, gathered while its attention
runs (tiersim/workload/context.py says how each style communicates)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES
from tiersim.state.model import Transformer

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def local_tokens(r: Resolved) -> int:
    """Tokens of one micro-batch on one context rank: s/c x b."""
    ex = r.execution
    return ex.seq_len // ex.parallel.context * ex.training.micro_batch_size


def kv_values_per_token(model: Transformer, tensor: int) -> int:
    """Key and value values of one token on one tensor-parallel rank: 2 x its kv heads x
    head_dim (at least one kv head a rank: GQA's heads are replicated when fewer than t);
    latent attention exchanges each head's up-projected key (nope + rope) and value."""
    if model.mla is not None:
        per_head = model.mla.nope + model.mla.rope + model.mla.v
        return max(1, model.heads // tensor) * per_head
    return 2 * max(1, model.kv_heads // tensor) * model.head_dim


def kv_chunk_bytes(r: Resolved, model: Transformer) -> float:
    """One rank's K/V of one layer and micro-batch, at the weights' (activations') precision."""
    act = PRECISION_BYTES[r.execution.training.precision.weights]
    return float(local_tokens(r) * kv_values_per_token(model, r.execution.parallel.tensor) * act)


def gathered_kv_bytes(r: Resolved, model: object) -> float:
    """The whole sequence's K/V of one layer that `all_gather` holds while attention runs
    (0 under the other styles or without context parallelism)."""
    par = r.execution.parallel
    if par.context == 1 or par.context_comm != "all_gather" or not isinstance(model, Transformer):
        return 0.0
    return par.context * kv_chunk_bytes(r, model)
