"""Model arithmetic: exact parameter counts, per-layer FLOPs and retained activation bytes.

Counts follow the real architectures: tied embeddings, biases, gated MLPs, grouped-query
attention and norms are all counted the way PyTorch implementations allocate them.
Activation bytes are tiersim.state.activations' (Korthikanti et al. 2022 under `megatron`,
the transformers modelling code under `huggingface`).
"""

from __future__ import annotations

from dataclasses import replace

from tiersim.config.schema import ModelSpec
from tiersim.core.records import record
from tiersim.state import layers as ly
from tiersim.state.activations import MEGATRON, Accounting, layer_bytes
from tiersim.state.layers import Matrix
from tiersim.state.model_shapes import (  # re-exported: the model's shapes
    LayerShape as LayerShape,
)
from tiersim.state.model_shapes import (
    LayerView as LayerView,
)
from tiersim.state.model_shapes import (
    Model as Model,
)
from tiersim.state.model_shapes import (
    ModelUnit as ModelUnit,
)
from tiersim.state.model_shapes import (
    UnitKind as UnitKind,
)
from tiersim.state.model_shapes import (
    latent_of,
    moe_of,
)
from tiersim.state.mtp import mtp_forward_flops, mtp_matrices
from tiersim.state.transformer_shape import TransformerShape

__all__ = ["GenericModel", "Matrix", "Model", "ModelUnit", "Transformer", "build_model"]


# transformers' GPT-2 (c_attn: Conv1D(3h, h), one weight [h, 3h] and one bias [3h]) and
# Megatron-LM's GPT (query_key_value) hold q, k and v in one tensor; transformers' Llama,
# Mistral, Qwen, ... in three. Listed as they are held (Transformer.qkv_as_one) where the
# scenario is resolved (state/held_layout.py: Megatron's code fuses every family's)
FUSED_QKV_FAMILIES = ("gpt2", "gpt")


@record
class Transformer(TransformerShape):
    """A decoder-only transformer; `parameters` of a generic model skips the dimensions."""

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
            qk_norm=spec.qk_norm,
            post_norms=spec.post_norms,
            mla=latent_of(spec),
            moe=moe_of(spec),
            sliding_window=spec.sliding_window,
            sliding_window_layers=spec.sliding_window_layers,
            fused_qkv=spec.family in FUSED_QKV_FAMILIES,
            mtp_layers=spec.mtp_layers,
        )

    # --- layers --------------------------------------------------------------------------------

    def is_sliding(self, index: int) -> bool:
        """Whether layer `index` attends over a sliding window."""
        if self.sliding_window is None:
            return False
        return self.sliding_window_layers is None or index in self.sliding_window_layers

    def attention_keys(self, seq: int, index: int = 0) -> int:
        """Keys each query attends to: s (full, as Megatron counts), min(s, w) in a window."""
        return min(seq, self.sliding_window) if self.is_sliding(index) else seq

    def _alike(self, i: int, j: int) -> bool:
        return self.is_moe(i) == self.is_moe(j) and self.is_sliding(i) == self.is_sliding(j)

    @property
    def _layers_differ(self) -> bool:
        """Whether the layers may differ (MoE pattern, or a window on some layers only)."""
        some = self.sliding_window is not None and self.sliding_window_layers is not None
        return self.moe is not None or some

    @property
    def is_moe_model(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        return 0 if self.moe is None else sum(self.is_moe(i) for i in range(self.layers))

    @property
    def active_parameters(self) -> int:
        """Parameters one token computes with: all but the routed experts it is not sent to
        (the capacity factor's padding aside)."""
        if self.moe is None:
            return self.parameters
        per_expert = (3 if self.gated_mlp else 2) * self.hidden * self.moe.ffn_hidden
        moe = self.moe_layers + self.mtp_layers * self.is_moe(self.layers - 1)  # MTP: as the last
        return self.parameters - moe * (self.moe.experts - self.moe.per_token) * per_expert

    # --- parameters ----------------------------------------------------------------------------

    def _norm(self, count: int) -> list[Matrix]:
        per = 2 if self.norm == "layernorm" else 1  # layernorm has a bias, RMSNorm does not
        return [Matrix(self.hidden, 1, per * count, tensor_split=False)]

    def attention_matrices(self) -> list[Matrix]:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.mla is not None:
            return ly.latent_matrices(h, self.heads, self.mla, self.qkv_bias or self.attn_out_bias)
        if self.qkv_as_one:  # one weight [h, q + 2kv] and its bias, in the module's order
            mats = [Matrix(h, q + 2 * kv), *([Matrix(q + 2 * kv, 1)] if self.qkv_bias else [])]
            mats.append(Matrix(q, h, split_rows=True))
        else:
            mats = [Matrix(h, q), Matrix(h, kv, 2), Matrix(q, h, split_rows=True)]
            mats += [Matrix(q, 1), Matrix(kv, 1, 2)] if self.qkv_bias else []
        if self.attn_out_bias:
            mats.append(Matrix(h, 1, tensor_split=False))  # row-parallel bias is replicated
        if self.qk_norm:  # one RMSNorm over head_dim each for queries and keys
            mats.append(Matrix(self.head_dim, 1, 2, tensor_split=False))
        return mats

    def layer_matrices(self, index: int = 0) -> list[Matrix]:
        """Every parameter tensor of layer `index` (all layers alike unless MoE)."""
        h, gated, bias = self.hidden, self.gated_mlp, self.mlp_bias
        if self.is_moe(index):
            mlp = ly.moe_matrices(h, self.moe, gated, bias, self.gate_up_as_one)
        else:
            mlp = ly.mlp_matrices(h, self.ffn_hidden, gated, bias, self.gate_up_as_one)
        return self.attention_matrices() + mlp + self._norm(4 if self.post_norms else 2)

    def embedding_matrices(self) -> list[Matrix]:
        mats = [Matrix(self.vocab, self.hidden, split_rows=True, embedding=True)]
        if self.position == "learned":
            mats.append(Matrix(self.max_positions, self.hidden, tensor_split=False, embedding=True))
        return mats

    def head_matrices(self) -> list[Matrix]:
        """Final norm and, when untied, the output projection."""
        mats = self._norm(1)
        if not self.tied_embeddings:
            mats.append(Matrix(self.vocab, self.hidden, split_rows=True, embedding=True))
        return mats + mtp_matrices(self)

    def units(self) -> tuple[ModelUnit, ...]:
        """The embeddings, the runs of alike layers (dense or MoE, each run's layers with its
        first layer's shape), the head. Alike layers make one run without a loop over them
        (a model may have 10^8 layers); an MoE's runs (and a window on
        some layers only) follow the pattern layer by layer."""
        runs: list[ModelUnit] = []
        differ = self._layers_differ
        if not differ:
            layer = tuple(self.layer_matrices(0))
            runs.append(ModelUnit("L0", UnitKind.LAYER, layer, self, self.layers, 0))
        for i in range(self.layers if differ else 0):
            if runs and self._alike(i, runs[-1].first):
                runs[-1] = replace(runs[-1], count=runs[-1].count + 1)
                continue
            shape = LayerView(self, i)
            runs.append(
                ModelUnit(f"L{i}", UnitKind.LAYER, tuple(self.layer_matrices(i)), shape, 1, i)
            )
        return (
            ModelUnit("embedding", UnitKind.EMBEDDING, tuple(self.embedding_matrices())),
            *runs,
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
            "vocab": self.tokenizer_vocab or self.vocab,
            **({} if self.tokenizer_vocab is None else {"padded_vocab": self.vocab}),
            **self._moe_summary(),
        }

    def _moe_summary(self) -> dict[str, object]:
        if self.moe is None:
            return {}
        return {
            "experts": self.moe.experts,
            "experts_per_token": self.moe.per_token,
            "moe_layers": self.moe_layers,
            "active_parameters": self.active_parameters,
        }

    def all_matrices(self) -> list[Matrix]:
        moe = self.moe_layers
        layer = [
            Matrix(
                m.rows,
                m.cols,
                m.count * n,
                m.tensor_split,
                m.split_rows,
                m.expert,
                m.embedding,
                down_every=m.down_every,
            )
            for kind, n in ((0, self.layers - moe), (1, moe))
            if n
            for m in self.layer_matrices(self._first_of_kind(kind))
        ]
        return self.embedding_matrices() + layer + self.head_matrices()

    def _first_of_kind(self, moe: int) -> int:
        return next(i for i in range(self.layers) if self.is_moe(i) == bool(moe))

    @property
    def layer_parameters(self) -> int:
        """Parameters of the first layer (of every layer, where all are alike)."""
        return sum(m.size for m in self.layer_matrices())

    @property
    def parameters(self) -> int:
        return sum(m.size for m in self.all_matrices())

    # --- FLOPs ---------------------------------------------------------------------------------

    def _linear_weights_per_token(self, index: int) -> float:
        """Weights one token multiplies in layer `index`: only its routed experts in an MoE."""
        attention = sum(m.size for m in self.attention_matrices() if m.cols > 1)
        if self.is_moe(index):
            return attention + ly.moe_linear_weights_per_token(
                self.hidden, self.moe, self.gated_mlp
            )
        return attention + (3 if self.gated_mlp else 2) * self.hidden * self.ffn_hidden

    def layer_forward_flops(self, seq: int, batch: int, index: int = 0) -> float:
        """Matrix multiplies (2 FLOPs per multiply-add) plus attention scores and values."""
        tokens = seq * batch
        linear = 2.0 * tokens * self._linear_weights_per_token(index)
        return linear + self.core_attention_flops(seq, batch, index)

    def core_attention_flops(self, seq: int, batch: int, index: int = 0) -> float:
        """The attention core's: QK^T and AV (latent attention's over its own widths)."""
        if self.mla is not None:
            return ly.latent_attention_flops(batch, seq, self.heads, self.mla)
        keys = self.attention_keys(seq, index)
        return 4.0 * batch * seq * keys * self.heads * self.head_dim

    def head_forward_flops(self, seq: int, batch: int) -> float:
        """The output projection to the vocabulary (logits), and any MTP modules."""
        return 2.0 * seq * batch * self.hidden * self.vocab + mtp_forward_flops(self, seq, batch)

    # --- activations ---------------------------------------------------------------------------

    def layer_activation_bytes(
        self,
        seq: int,
        batch: int,
        tensor: int = 1,
        sequence_parallel: bool = False,
        recompute: str = "none",
        accounting: Accounting = MEGATRON,
        index: int = 0,
    ) -> float:
        """Bytes layer `index` retains for backward on one GPU (tiersim.state.activations).

        Under `megatron` (Korthikanti et al. §4, 16-bit): replicated across tensor-parallel
        ranks (unless sequence parallel) the two norm inputs (4sbh), the attention and MLP
        inputs (2sbh each) and two dropout masks (sbh each) = 10sbh; split by t: Q (2sbh), K
        and V (2sb·kv each), the out-projection input (2sbh), the MLP's wide tensors (4sbf, or
        6sbf gated), and attention's 5as²b (softmax, mask, dropout). With f = 4h and kv = h
        this is s·b·h·(10 + 24/t + 5as/(ht)). Gemma's post-norms, q/k norms, latent attention
        and MoE layers add or replace terms (tiersim.state.layers).
        """
        kept = layer_bytes(
            self, seq, batch, accounting, tensor, sequence_parallel, recompute, index
        )
        return self.activation_factor * kept


@record
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

    def is_moe(self, index: int) -> bool:
        return False

    is_moe_model = False

    def layer_matrices(self, index: int = 0) -> list[Matrix]:
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

    def layer_forward_flops(self, seq: int, batch: int, index: int = 0) -> float:
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
