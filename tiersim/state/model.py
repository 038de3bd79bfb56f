"""Model arithmetic: exact parameter counts, per-layer FLOPs and retained activation bytes.

Counts follow the real architectures: tied embeddings, biases, gated MLPs, grouped-query
attention and norms are all counted the way PyTorch implementations allocate them.
Activation bytes are tiersim.state.activations' (Korthikanti et al. 2022 under `megatron`,
the transformers modelling code under `huggingface`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tiersim.config.schema import ModelSpec
from tiersim.state.activations import MEGATRON, Accounting, layer_bytes


@dataclass(frozen=True)
class Matrix:
    """`count` parameter tensors of shape (rows, cols); cols == 1 for vectors."""

    rows: int
    cols: int
    count: int = 1
    tensor_split: bool = True  # divided by the tensor-parallel size under Megatron TP
    split_rows: bool = False  # row-parallel (and vocab-parallel) tensors split rows, not cols

    @property
    def size(self) -> int:
        return self.rows * self.cols * self.count


class UnitKind(Enum):
    EMBEDDING = "embedding"
    LAYER = "layer"
    HEAD = "head"


@dataclass(frozen=True)
class ModelUnit:
    """One unit of the model's depth: its embeddings, a run of `count` alike layers, or its
    head (final norm and output projection). Layers carry their own `shape` (what their FLOPs,
    activations and attention follow: any `LayerShape`), so the layers of one model need not
    be alike; alike layers in a row are one unit, so a model of any depth is a few units."""

    name: str  # "embedding", "L0" (the first of the run), ..., "head"
    kind: UnitKind
    matrices: tuple[Matrix, ...]  # of one layer of the run
    shape: LayerShape | None = None  # the layers'; None for the embedding and head
    count: int = 1  # layers in the run
    first: int = 0  # the index of its first layer


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer; `parameters` of a generic model skips the dimensions."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    max_positions: int | None
    gated_mlp: bool
    tied_embeddings: bool
    qkv_bias: bool
    attn_out_bias: bool
    mlp_bias: bool
    norm: str
    position: str
    activation_factor: float = 1.0

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> Transformer:
        return cls(
            layers=spec.layers,
            hidden=spec.hidden,
            heads=spec.heads,
            kv_heads=spec.kv_heads or spec.heads,
            head_dim=spec.head_dim or spec.hidden // spec.heads,
            ffn_hidden=spec.ffn_hidden,
            vocab=spec.vocab,
            max_positions=spec.max_positions,
            gated_mlp=spec.gated_mlp,
            tied_embeddings=spec.tied_embeddings,
            qkv_bias=spec.qkv_bias,
            attn_out_bias=spec.attn_out_bias,
            mlp_bias=spec.mlp_bias,
            norm=spec.norm,
            position=spec.position,
            activation_factor=spec.activation_factor,
        )

    # --- parameters ----------------------------------------------------------------------------

    def _norm(self, count: int) -> list[Matrix]:
        per = 2 if self.norm == "layernorm" else 1  # layernorm has a bias, RMSNorm does not
        return [Matrix(self.hidden, 1, per * count, tensor_split=False)]

    def layer_matrices(self) -> list[Matrix]:
        """Every parameter tensor of one transformer layer."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        f = self.ffn_hidden
        mats = [Matrix(h, q), Matrix(h, kv, 2), Matrix(q, h, split_rows=True)]
        if self.qkv_bias:
            mats += [Matrix(q, 1), Matrix(kv, 1, 2)]
        if self.attn_out_bias:
            mats.append(Matrix(h, 1, tensor_split=False))  # row-parallel bias is replicated
        mats += [Matrix(h, f, 3 if self.gated_mlp else 2)]
        if self.mlp_bias:
            mats += [Matrix(f, 1, 2 if self.gated_mlp else 1), Matrix(h, 1, tensor_split=False)]
        return mats + self._norm(2)

    def embedding_matrices(self) -> list[Matrix]:
        mats = [Matrix(self.vocab, self.hidden, split_rows=True)]
        if self.position == "learned":
            mats.append(Matrix(self.max_positions, self.hidden, tensor_split=False))
        return mats

    def head_matrices(self) -> list[Matrix]:
        """Final norm and, when untied, the output projection."""
        mats = self._norm(1)
        if not self.tied_embeddings:
            mats.append(Matrix(self.vocab, self.hidden, split_rows=True))
        return mats

    def units(self) -> tuple[ModelUnit, ...]:
        """The embeddings, each layer (all of this model's dimensions), the head."""
        layer = tuple(self.layer_matrices())
        return (
            ModelUnit("embedding", UnitKind.EMBEDDING, tuple(self.embedding_matrices())),
            ModelUnit("L0", UnitKind.LAYER, layer, self, count=self.layers),
            ModelUnit("head", UnitKind.HEAD, tuple(self.head_matrices())),
        )

    @property
    def attention_heads(self) -> int:
        return self.heads

    @property
    def attention_width(self) -> int:
        """Width of the attention's queries (heads x head_dim)."""
        return self.heads * self.head_dim

    def summary(self) -> dict[str, object]:
        return {
            "parameters": self.parameters,
            "layers": self.layers,
            "hidden": self.hidden,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "ffn_hidden": self.ffn_hidden,
            "vocab": self.vocab,
        }

    def all_matrices(self) -> list[Matrix]:
        layer = [
            Matrix(m.rows, m.cols, m.count * self.layers, m.tensor_split, m.split_rows)
            for m in self.layer_matrices()
        ]
        return self.embedding_matrices() + layer + self.head_matrices()

    @property
    def layer_parameters(self) -> int:
        return sum(m.size for m in self.layer_matrices())

    @property
    def parameters(self) -> int:
        return sum(m.size for m in self.all_matrices())

    # --- FLOPs ---------------------------------------------------------------------------------

    def _linear_weights_per_layer(self) -> int:
        return sum(m.size for m in self.layer_matrices() if m.cols > 1)

    def layer_forward_flops(self, seq: int, batch: int) -> float:
        """Matrix multiplies (2 FLOPs per multiply-add) plus attention scores and values."""
        tokens = seq * batch
        linear = 2.0 * tokens * self._linear_weights_per_layer()
        attention = 4.0 * batch * seq * seq * self.heads * self.head_dim  # QK^T and AV
        return linear + attention

    def head_forward_flops(self, seq: int, batch: int) -> float:
        """The output projection to the vocabulary (logits)."""
        return 2.0 * seq * batch * self.hidden * self.vocab

    # --- activations ---------------------------------------------------------------------------

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int = 1,
        sequence_parallel: bool = False,
        recompute: str = "none",
        accounting: Accounting = MEGATRON,
    ) -> float:
        """Bytes one layer retains for backward on one GPU (tiersim.state.activations).

        Under `megatron` (Korthikanti et al. §4, 16-bit): replicated across tensor-parallel
        ranks (unless sequence parallel) the two norm inputs (4sbh), the attention and MLP
        inputs (2sbh each) and two dropout masks (sbh each) = 10sbh; split by t: Q (2sbh), K
        and V (2sb·kv each), the out-projection input (2sbh), the MLP's wide tensors (4sbf, or
        6sbf gated), and attention's 5as²b (softmax, mask, dropout). With f = 4h and kv = h
        this is s·b·h·(10 + 24/t + 5as/(ht)).
        """
        kept = layer_bytes(self, seq, batch, accounting, tensor, sequence_parallel, recompute)
        return self.activation_factor * kept


@dataclass(frozen=True)
class GenericModel:
    """A model known only by its parameter count and layer count (uniform layers)."""

    total_parameters: int
    layers: int
    activation_bytes_per_layer: float | None
    forward_flops_per_token_per_layer: float | None
    hidden: int | None = None
    activation_factor: float = 1.0
    tied_embeddings = False  # no embeddings known apart from the layers
    vocab = None
    attention_heads = 0  # nothing known of its attention (no selective recompute to time)
    attention_width = 0

    @property
    def parameters(self) -> int:
        return self.total_parameters

    @property
    def layer_parameters(self) -> int:
        return self.total_parameters // self.layers

    def layer_matrices(self) -> list[Matrix]:
        return [Matrix(self.layer_parameters, 1)]

    def units(self) -> tuple[ModelUnit, ...]:
        """Uniform layers; what their even split leaves over counts with the first stage's
        embedding unit (no head is known)."""
        spare = self.total_parameters - self.layers * self.layer_parameters
        layer = tuple(self.layer_matrices())
        return (
            ModelUnit("embedding", UnitKind.EMBEDDING, (Matrix(spare, 1),) if spare else ()),
            ModelUnit("L0", UnitKind.LAYER, layer, self, count=self.layers),
            ModelUnit("head", UnitKind.HEAD, ()),
        )

    def summary(self) -> dict[str, object]:
        return {"parameters": self.parameters, "layers": self.layers}

    def layer_forward_flops(self, seq: int, batch: int) -> float:
        per_token = self.forward_flops_per_token_per_layer
        if per_token is None:
            per_token = 2.0 * self.total_parameters / self.layers
        return per_token * seq * batch

    def head_forward_flops(self, seq: int, batch: int) -> float:
        return 0.0

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int = 1,
        sequence_parallel: bool = False,
        recompute: str = "none",
        accounting: Accounting = MEGATRON,
    ) -> float:
        """The given per-layer bytes, divided by t; full recompute keeps the layer input 2sbh
        when `hidden` is known, otherwise nothing (the input size of a generic layer is unknown)."""
        if recompute == "full":
            width = accounting.compute_bytes
            kept = width * seq * batch * self.hidden if self.hidden else 0.0
        else:
            kept = self.activation_bytes_per_layer or 0.0
        return self.activation_factor * kept / tensor


class LayerShape(Protocol):
    """What one layer's compute, activations and attention follow."""

    @property
    def attention_heads(self) -> int: ...

    @property
    def attention_width(self) -> int: ...

    def layer_forward_flops(self, seq: int, batch: int) -> float: ...

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int,
        sequence_parallel: bool,
        recompute: str,
        accounting: Accounting = MEGATRON,
    ) -> float: ...


class Model(LayerShape, Protocol):
    """What the layers below the scenario use of a model, whichever kind it is: its units
    (embedding, each layer, head) and the figures of the whole."""

    layers: int
    hidden: int | None
    tied_embeddings: bool
    vocab: int | None
    activation_factor: float

    @property
    def parameters(self) -> int: ...

    def units(self) -> tuple[ModelUnit, ...]: ...

    def head_forward_flops(self, seq: int, batch: int) -> float: ...

    def summary(self) -> dict[str, object]: ...


def build_model(spec: ModelSpec) -> Model:
    if spec.parameters is not None:
        return GenericModel(
            total_parameters=spec.parameters,
            layers=spec.layers,
            activation_bytes_per_layer=spec.activation_bytes_per_layer,
            forward_flops_per_token_per_layer=spec.forward_flops_per_token_per_layer,
            hidden=spec.hidden,
            activation_factor=spec.activation_factor,
        )
    return Transformer.from_spec(spec)
