"""The shapes a model is made of: its units (embedding, runs of alike layers, head), one
layer of a model whose layers differ (`LayerView`), what a layer and a model offer the rest of
tiersim (`LayerShape`, `Model`), and the MoE and latent-attention parts read from a spec."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from tiersim.config.schema import ModelSpec
from tiersim.core.records import record
from tiersim.state.activation_kinds import MEGATRON, Accounting
from tiersim.state.layers import Latent, Matrix, Moe


class UnitKind(Enum):
    EMBEDDING = "embedding"
    LAYER = "layer"
    HEAD = "head"


@record
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


def latent_of(spec: ModelSpec) -> Latent | None:
    if spec.kv_lora_rank is None:
        return None
    return Latent(
        q_rank=spec.q_lora_rank,
        kv_rank=spec.kv_lora_rank,
        rope=spec.qk_rope_head_dim,
        nope=spec.qk_nope_head_dim,
        v=spec.v_head_dim,
    )


def moe_of(spec: ModelSpec) -> Moe | None:
    if spec.experts is None:
        return None
    width = spec.expert_ffn_hidden or spec.ffn_hidden
    return Moe(
        experts=spec.experts,
        per_token=spec.experts_per_token,
        ffn_hidden=width,
        shared=spec.shared_experts,
        shared_ffn_hidden=spec.shared_expert_ffn_hidden or width,
        shared_gate=spec.shared_expert_gate,
        first_dense=spec.first_dense_layers,
        every=spec.moe_every,
        dense_layers=tuple(spec.dense_layers),
        capacity_factor=spec.capacity_factor,
        groups=spec.expert_groups,
        group_topk=spec.expert_groups_per_token or 1,
    )


@record
class LayerView:
    """Layer `index` of a model whose layers differ (dense or MoE): a unit's `shape`."""

    model: LayeredModel
    index: int

    @property
    def attention_heads(self) -> int:
        return self.model.attention_heads

    @property
    def attention_width(self) -> int:
        return self.model.attention_width

    def layer_forward_flops(self, seq: int, batch: int) -> float:
        return self.model.layer_forward_flops(seq, batch, self.index)

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int = 1,
        sequence_parallel: bool = False,
        recompute: str = "none",
        accounting: Accounting = MEGATRON,
    ) -> float:
        return self.model.layer_activation_bytes(
            seq, batch, tensor, sequence_parallel, recompute, accounting, self.index
        )


class LayeredModel(Protocol):
    """A model whose layers differ, asked layer by layer (model.Transformer, which imports
    this module: named by what a `LayerView` asks of it rather than imported)."""

    @property
    def attention_heads(self) -> int: ...

    @property
    def attention_width(self) -> int: ...

    def is_moe(self, index: int) -> bool: ...

    def layer_forward_flops(self, seq: int, batch: int, index: int = 0) -> float: ...

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int = 1,
        sequence_parallel: bool = False,
        recompute: str = "none",
        accounting: Accounting = MEGATRON,
        index: int = 0,
    ) -> float: ...


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

    @property
    def is_moe_model(self) -> bool: ...

    def is_moe(self, index: int) -> bool: ...

    def units(self) -> tuple[ModelUnit, ...]: ...

    def head_forward_flops(self, seq: int, batch: int) -> float: ...

    def summary(self) -> dict[str, object]: ...
