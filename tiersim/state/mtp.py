"""DeepSeek-V3's multi-token-prediction modules (`model.mtp_layers`; DeepSeek-V3 technical
report §2.2): each the norms of the embedding and of the hidden state, their projection
2h -> h, a transformer layer like the model's last, and a final norm, sharing the embedding
and the output head; trained on the last pipeline stage beside the head."""

from __future__ import annotations

from typing import Protocol

from tiersim.state.layers import Matrix


class WithLastLayer(Protocol):
    """A transformer whose last layer the modules copy: model.Transformer, which calls this
    module, named here by what the modules read of it rather than imported."""

    layers: int
    hidden: int
    vocab: int
    norm: str
    mtp_layers: int

    def layer_matrices(self, index: int = 0) -> list[Matrix]: ...

    def layer_forward_flops(self, seq: int, batch: int, index: int = 0) -> float: ...


def mtp_matrices(m: WithLastLayer) -> list[Matrix]:
    """The modules' parameter tensors (none without `mtp_layers`)."""
    if not m.mtp_layers:
        return []
    h, d = m.hidden, m.mtp_layers
    per_norm = 2 if m.norm == "layernorm" else 1  # a bias beside the weight
    norms = Matrix(h, 1, per_norm * 3, tensor_split=False)
    one = [norms, Matrix(2 * h, h), *m.layer_matrices(m.layers - 1)]
    return [
        Matrix(
            x.rows,
            x.cols,
            x.count * d,
            x.tensor_split,
            x.split_rows,
            x.expert,
            down_every=x.down_every,
        )
        for x in one
    ]


def mtp_forward_flops(m: WithLastLayer, seq: int, batch: int) -> float:
    """The modules' forward: the projection, the layer, and each module's own logits."""
    if not m.mtp_layers:
        return 0.0
    tokens = seq * batch
    projection = 2.0 * tokens * 2 * m.hidden * m.hidden
    logits = 2.0 * tokens * m.hidden * m.vocab
    layer = m.layer_forward_flops(seq, batch, m.layers - 1)
    return m.mtp_layers * (projection + layer + logits)
