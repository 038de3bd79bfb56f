"""Layers that are not all alike: the parameter tensors, FLOPs and activations of one layer's
attention (multi-head, grouped-query or DeepSeek's multi-head latent attention) and MLP
(dense, or mixture-of-experts with a router, routed and shared experts), as the
`transformers` classes allocate them (modeling_mixtral, _qwen2_moe, _qwen3_moe, _deepseek_v3,
_gemma2, _gemma3 and _phi3 of transformers 5).

A layer is MoE when `Moe.is_moe(index)`: past the first `first_dense` layers (DeepSeek's
first_k_dense_replace), every `every`-th (Qwen's decoder_sparse_step: (i + 1) % every == 0),
and not listed in `dense_layers` (Qwen's mlp_only_layers).
"""

from __future__ import annotations

from tiersim.core.records import record


@record
class Matrix:
    """`count` parameter tensors of shape (rows, cols); cols == 1 for vectors. A weight's
    shape is [in, out] (y = x W), the transpose of PyTorch's nn.Linear [out, in], except the
    MLP's down projection, kept in its gate's and up's shape (h, f) though it maps f to h:
    nn.Linear holds it [h, f] (`down_every`)."""

    rows: int
    cols: int
    count: int = 1
    tensor_split: bool = True  # divided by the tensor-parallel size under Megatron TP
    split_rows: bool = False  # row-parallel (and vocab-parallel) tensors split rows, not cols
    expert: bool = False  # a routed expert's tensor: sharded by expert parallelism
    embedding: bool = False  # an embedding or the output head (Muon leaves it to AdamW)
    # kept in fp32 whatever the weights' precision, under implementation: huggingface
    # (transformers' _keep_in_fp32_modules_strict: DeepSeek-V3's router weight)
    fp32: bool = False
    # held in tensors of 3 dimensions (transformers 5's fused experts, under implementation:
    # huggingface), which torch.optim.Muon refuses: Muon leaves them to AdamW
    fused: bool = False
    # 1 of every `down_every` of the `count` tensors is an MLP's down projection (3: gate, up
    # and down; 2: up and down; 0: none), whose nn.Linear weight is [rows, cols], not [cols, rows]
    down_every: int = 0

    @property
    def size(self) -> int:
        return self.rows * self.cols * self.count

    def linear_shapes(self) -> tuple[tuple[int, int, int], ...]:
        """(out, in, tensors) of these weights as PyTorch's nn.Linear holds them, [out, in]:
        the orientation FSDP2 shards (dim 0) and torch.optim.Muon transposes (out > in)."""
        down = self.count // self.down_every if self.down_every else 0
        shapes = ((self.cols, self.rows, self.count - down), (self.rows, self.cols, down))
        return tuple(s for s in shapes if s[2])


@record
class Moe:
    """A mixture-of-experts MLP: `experts` routed experts of width `ffn_hidden`, `per_token`
    of them active per token, `shared` always-active experts of width `shared_ffn_hidden`."""

    experts: int
    per_token: int
    ffn_hidden: int
    shared: int = 0
    shared_ffn_hidden: int = 0
    shared_gate: bool = False
    first_dense: int = 0
    every: int = 1
    dense_layers: tuple[int, ...] = ()
    capacity_factor: float | None = None  # None: dropless (exactly per_token x tokens rows)
    # DeepSeek-V3's router: sigmoid scores, top-k within the best `group_topk` of `groups`
    # expert groups (n_group, topk_group); None: a softmax router
    groups: int | None = None
    group_topk: int = 1

    def is_moe(self, index: int) -> bool:
        return (
            index >= self.first_dense
            and (index + 1) % self.every == 0
            and index not in self.dense_layers
        )

    @property
    def padding(self) -> float:
        """Rows computed per routed token-expert pair: the capacity factor, 1 when dropless."""
        return self.capacity_factor or 1.0

    def busiest(self, imbalance: float, expert_ranks: int) -> float:
        """The busiest expert rank's rows over the mean as they are computed: 1 without expert
        parallelism (every GPU runs every expert over its own rows) or with a capacity factor
        (each expert's rows padded to its capacity, which caps the busiest: `padding` already
        charges that cap to every rank); else `imbalance` (parallel.expert_imbalance)."""
        return imbalance if expert_ranks > 1 and self.capacity_factor is None else 1.0


@record
class Latent:
    """Multi-head latent attention (DeepSeek V2/V3): queries through a rank-`q_rank` bottleneck
    (or a plain projection when None), keys and values through a shared rank-`kv_rank` latent;
    each head's query and key are `nope` + `rope` wide (the rope part of the key is shared by
    all heads), its value `v` wide."""

    q_rank: int | None
    kv_rank: int
    rope: int
    nope: int
    v: int


def mlp_matrices(h: int, f: int, gated: bool, bias: bool, gate_up: bool = False) -> list[Matrix]:
    """A dense MLP of width f: up (and gate) column-parallel, down row-parallel; `gate_up`:
    gate and up held as one [2f, h] (Phi-3's gate_up_proj, Megatron's linear_fc1 and
    dense_h_to_4h: state/held_layout.py), its bias one [2f]."""
    if gate_up and gated:
        mats = [Matrix(h, 2 * f), Matrix(h, f, down_every=1)]
        return mats + ([Matrix(2 * f, 1), Matrix(h, 1, tensor_split=False)] if bias else [])
    per = 3 if gated else 2
    mats = [Matrix(h, f, per, down_every=per)]
    if bias:
        mats += [Matrix(f, 1, 2 if gated else 1), Matrix(h, 1, tensor_split=False)]
    return mats


def moe_matrices(h: int, moe: Moe, gated: bool, bias: bool, gate_up: bool = False) -> list[Matrix]:
    """Router (replicated), routed experts (no biases in any family), shared experts as one
    MLP of width shared x shared_ffn_hidden (as DeepSeek builds them; biases as a dense MLP's),
    and Qwen2-MoE's one-output shared-expert gate. `gate_up` (gated): every expert's gate and
    up one tensor [2f, h], then every expert's down [h, f] (Megatron-Core's SequentialMLP and
    TEGroupedMLP linear_fc1 / linear_fc2, Megatron-DeepSpeed's dense_h_to_4h / dense_4h_to_h:
    state/held_layout.py), a shared expert's likewise (SharedExpertMLP linear_fc1)."""
    mats = [Matrix(h, moe.experts, tensor_split=False, fp32=moe.groups is not None)]
    f, n = moe.ffn_hidden, moe.experts
    if gate_up and gated:
        mats += [Matrix(h, 2 * f, n, expert=True), Matrix(h, f, n, expert=True, down_every=1)]
    else:
        per = 3 if gated else 2  # an expert's gate (gated), up and down projections
        mats.append(Matrix(h, f, per * n, expert=True, down_every=per))
    if moe.shared:
        mats += mlp_matrices(h, moe.shared * moe.shared_ffn_hidden, gated, bias, gate_up)
    if moe.shared_gate:
        mats.append(Matrix(h, 1, tensor_split=False))
    return mats


def latent_matrices(h: int, heads: int, mla: Latent, bias: bool) -> list[Matrix]:
    """DeepSeek's attention: the down projections (and their norms) are replicated under
    tensor parallelism (Megatron's MLA duplicates them), the up projections column-parallel.
    `bias` (attention_bias) adds biases to q_a, kv_a and o."""
    qk = heads * (mla.nope + mla.rope)
    mats = []
    if mla.q_rank is None:
        mats.append(Matrix(h, qk))
    else:
        mats += [Matrix(h, mla.q_rank, tensor_split=False)]
        mats += [Matrix(mla.q_rank, 1, 2 if bias else 1, tensor_split=False)]  # norm (+ bias)
        mats += [Matrix(mla.q_rank, qk)]
    mats += [Matrix(h, mla.kv_rank + mla.rope, tensor_split=False)]
    if bias:
        mats.append(Matrix(mla.kv_rank + mla.rope, 1, tensor_split=False))
    mats += [Matrix(mla.kv_rank, 1, tensor_split=False)]  # kv_a_layernorm
    mats += [Matrix(mla.kv_rank, heads * (mla.nope + mla.v))]
    mats += [Matrix(heads * mla.v, h, split_rows=True)]
    if bias:
        mats.append(Matrix(h, 1, tensor_split=False))
    return mats


def latent_attention_flops(batch: int, seq: int, heads: int, mla: Latent) -> float:
    """QK^T over nope + rope wide heads, then AV over v wide values."""
    return 2.0 * batch * seq * seq * heads * (mla.nope + mla.rope + mla.v)


def latent_activation_bytes(s: int, b: int, heads: int, mla: Latent) -> tuple[float, float, float]:
    """(replicated, up-projected Q, K, V, out-projection input) 16-bit bytes MLA keeps beyond
    the layer's shared inputs. Replicated (the down projections are duplicated under tensor
    parallelism): the q and kv latents before and after their norms and the shared rope key.
    Split like Q, K, V: Q and K (nope + rope per head), V; and the out-projection input
    (heads x v)."""
    latents = 2.0 * (mla.q_rank or 0) * 2 + 2.0 * mla.kv_rank * 2 + 2.0 * mla.rope
    qkv = 2.0 * heads * (mla.nope + mla.rope) * 2 + 2.0 * heads * mla.v
    return s * b * latents, s * b * qkv, s * b * 2.0 * heads * mla.v


def moe_activation_bytes(s: int, b: int, h: int, moe: Moe, gated: bool) -> tuple[float, float]:
    """(replicated, split) bytes an MoE MLP keeps for backward beyond its input.

    Replicated (every tensor-parallel rank routes all its tokens): the router's fp32
    probabilities (4·T·E) and the top-k weights (fp32) and indices (int64), 12·T·k.
    Split by tensor parallelism (expert tensor parallelism = t): the dispatched token copies
    (2·h per row), the experts' wide tensors (6·f gated, 4·f otherwise, per row) and their
    outputs kept for the weighted combine (2·h per row), over k·T·capacity-factor rows; the
    shared experts' wide tensors as a dense MLP's; Qwen2-MoE's shared gate output (2·T).
    """
    tokens = s * b
    router = 4.0 * tokens * moe.experts + 12.0 * tokens * moe.per_token
    rows = tokens * moe.per_token * moe.padding
    wide = 6.0 if gated else 4.0
    routed = rows * (2.0 * h + wide * moe.ffn_hidden + 2.0 * h)
    shared = wide * tokens * moe.shared * moe.shared_ffn_hidden
    gate = 2.0 * tokens if moe.shared_gate else 0.0
    return router, routed + shared + gate


def moe_linear_weights_per_token(h: int, moe: Moe, gated: bool) -> float:
    """Weights each token multiplies in an MoE MLP: the router, its k experts (times the
    capacity factor: padded rows are computed too), the shared experts and their gate."""
    per_expert = (3 if gated else 2) * h * moe.ffn_hidden
    shared = (3 if gated else 2) * h * moe.shared * moe.shared_ffn_hidden
    gate = h if moe.shared_gate else 0
    return h * moe.experts + moe.per_token * moe.padding * per_expert + shared + gate
