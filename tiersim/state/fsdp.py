"""FSDP2's sharding (torch.distributed.fsdp.fully_shard), exact per rank.

Measured on torch 2.13 (gloo, 2 and 4 CPU ranks; tests/test_fsdp2.py runs it): every parameter
is sharded on its first dimension with torch.chunk's rule, c = ceil(d0 / W) rows per rank, so
rank r holds max(0, min(c, d0 - r·c)) rows (9 rows on 4 ranks: 3, 3, 3, 0). Each parameter's
local shard sits in its own storage padded to c rows on every rank (also a rank with 0 rows).
Gradients after backward are views into a per-group reduce-scatter buffer of the padded sizes:
every rank holds the padded total. Adam's exp_avg and exp_avg_sq have the unpadded local shape;
its `step` is one fp32 scalar per parameter tensor (tiersim's optimizer class leaves it out).

Shapes are the PyTorch layout of tiersim's modules and of transformers' Llama: nn.Linear's
weight is (out, in), an embedding (vocab, hidden), a norm's weight and bias (hidden,); of
transformers' GPT-2 (Transformer.qkv_as_one): Conv1D's weight (in, out), q, k, v one c_attn.
"""

from __future__ import annotations

import math

from tiersim.core.records import record
from tiersim.state.model import Transformer


@record
class Shape:
    rows: int  # dim 0, the dimension FSDP2 shards
    row_values: int  # values per row (the product of the other dimensions; 1 for a vector)


def _linear(out: int, inp: int, bias: bool) -> list[Shape]:
    return [Shape(out, inp), *([Shape(out, 1)] if bias else [])]


def _norm(m: Transformer) -> list[Shape]:
    return [Shape(m.hidden, 1)] * (2 if m.norm == "layernorm" else 1)


def _conv1d(inp: int, out: int, bias: bool) -> list[Shape]:
    """transformers' Conv1D (GPT-2): weight [in, out], the transpose of nn.Linear's."""
    return [Shape(inp, out), *([Shape(out, 1)] if bias else [])]


def gpt2_layer_shapes(m: Transformer) -> list[Shape]:
    """transformers' GPT2Block: ln_1, attn.c_attn (q, k, v fused: Conv1D(3h, h)), attn.c_proj,
    ln_2, mlp.c_fc, mlp.c_proj, every Conv1D with its bias (modeling_gpt2.py)."""
    q, kv, h, f = m.heads * m.head_dim, m.kv_heads * m.head_dim, m.hidden, m.ffn_hidden
    attn = _conv1d(h, q + 2 * kv, m.qkv_bias) + _conv1d(q, h, m.attn_out_bias)
    return [*_norm(m), *attn, *_norm(m), *_conv1d(h, f, m.mlp_bias), *_conv1d(f, h, m.mlp_bias)]


def layer_shapes(m: Transformer) -> list[Shape]:
    """One decoder layer: norms, q/k/v/o projections, the MLP (gate, up, down)."""
    if m.qkv_as_one and m.fused_qkv:  # under fsdp only transformers' GPT-2 (held_layout.py)
        return gpt2_layer_shapes(m)
    q, kv, h, f = m.heads * m.head_dim, m.kv_heads * m.head_dim, m.hidden, m.ffn_hidden
    if m.gate_up_as_one:  # Phi-3's gate_up_proj [2f, h]
        up = _linear(2 * f, h, m.mlp_bias)
    else:
        up = [*_linear(f, h, m.mlp_bias)] * (2 if m.gated_mlp else 1)
    if m.qkv_as_one:  # Phi-3's qkv_proj [q + 2kv, h]
        qkv = _linear(q + 2 * kv, h, m.qkv_bias)
    else:
        qkv = _linear(q, h, m.qkv_bias) + _linear(kv, h, m.qkv_bias) * 2
    attn = qkv + _linear(h, q, m.attn_out_bias)
    return [*_norm(m), *attn, *_norm(m), *up, *_linear(h, f, m.mlp_bias)]


def rest_shapes(m: Transformer) -> list[Shape]:
    """Embeddings, final norm and (untied) output projection: the root FSDP group."""
    shapes = [Shape(m.vocab, m.hidden)]
    if m.position == "learned":
        shapes.append(Shape(m.max_positions or 0, m.hidden))
    shapes += _norm(m)
    if not m.tied_embeddings:
        shapes.append(Shape(m.vocab, m.hidden))
    return shapes


def model_shapes(m: Transformer) -> list[Shape]:
    return [*rest_shapes(m), *(s for _ in range(m.layers) for s in layer_shapes(m))]


def rows_on_rank(rows: int, world: int, rank: int) -> int:
    chunk = math.ceil(rows / world)
    return max(0, min(chunk, rows - rank * chunk))


def padded_values(shapes: list[Shape], world: int) -> int:
    """Values every rank stores per parameter class: each parameter padded to ceil(d0/W) rows."""
    return sum(math.ceil(s.rows / world) * s.row_values for s in shapes)


def local_values(shapes: list[Shape], world: int, rank: int) -> int:
    """Values of rank `rank`'s shards (DTensor.to_local()), without padding."""
    return sum(rows_on_rank(s.rows, world, rank) * s.row_values for s in shapes)


@record
class RankBytes:
    """One rank's bytes after a training step with Adam (or AdamW)."""

    weights_local: int
    weights_stored: int  # padded storage
    gradients: int  # the padded reduce-scatter buffers
    optimizer: int  # exp_avg and exp_avg_sq, unpadded local shape
    step_counters: int  # one 4-byte `step` per parameter tensor

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def rank_bytes(m: Transformer, world: int, rank: int, value_bytes: int) -> RankBytes:
    """Parameters, gradients and Adam state in `value_bytes` (the model's dtype)."""
    shapes = model_shapes(m)
    local = local_values(shapes, world, rank) * value_bytes
    padded = padded_values(shapes, world) * value_bytes
    return RankBytes(local, padded, padded, 2 * local, 4 * len(shapes))
