"""Plain-PyTorch transformers whose parameter tensors are exactly those tiersim counts, and the
instruments `tiersim measure` reads them with (storage bytes, optimizer state, saved tensors).

One module covers the GPT-2 style (LayerNorm with bias, learned positions, biases on every linear
layer, GeLU MLP, tied embeddings) and the Llama style (RMSNorm, rotary positions, SwiGLU MLP,
grouped-query attention, no biases, untied output projection): the flags of
`tiersim.state.model.Transformer` choose. Every parameter tensor is one `Matrix` of
`Transformer.layer_matrices()`, `embedding_matrices()` or `head_matrices()`: separate q, k and v
projections (so factored optimizer state such as Adafactor's row + column statistics matches too),
separate gate and up projections, and a tied output projection that is the embedding tensor itself.

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tiersim.groundtruth.quiet_imports import quiet_imports
from tiersim.state.model import Transformer
from tiersim.state.optimizers import optimizer

# eager: the explicit softmax, as math (the name a scenario's training.attention_kernel and
# measure's --attention give it: review 2026-12-07-l)
ATTENTION = ("sdpa", "math", "eager")


def _norm(m: Transformer) -> nn.Module:
    if m.norm == "layernorm":
        return nn.LayerNorm(m.hidden, eps=1e-5)
    return nn.RMSNorm(m.hidden, eps=1e-5)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding's pairing as Hugging Face Llama writes it: (x1, x2) -> (-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """RoPE tables for one sequence length, held as non-persistent buffers (not parameters)."""

    def __init__(self, head_dim: int, seq_len: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, heads, seq, head_dim)."""
        return x * self.cos + rotate_half(x) * self.sin


class Attention(nn.Module):
    def __init__(self, m: Transformer, attention: str):
        super().__init__()
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        self.heads, self.kv_heads, self.head_dim = m.heads, m.kv_heads, m.head_dim
        self.attention = attention
        self.q_proj = nn.Linear(m.hidden, q, bias=m.qkv_bias)
        self.k_proj = nn.Linear(m.hidden, kv, bias=m.qkv_bias)
        self.v_proj = nn.Linear(m.hidden, kv, bias=m.qkv_bias)
        self.o_proj = nn.Linear(q, m.hidden, bias=m.attn_out_bias)

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, heads, self.head_dim).transpose(1, 2)

    def _math(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, future: torch.Tensor):
        """Eager attention: explicit scores, causal mask, softmax in fp32 (as HF Llama's eager)."""
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.masked_fill(future, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)

    def forward(self, x: torch.Tensor, rotary: Rotary | None, future: torch.Tensor):
        q = self._split(self.q_proj(x), self.heads)
        k = self._split(self.k_proj(x), self.kv_heads)
        v = self._split(self.v_proj(x), self.kv_heads)
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        if self.attention == "sdpa":
            gqa = self.kv_heads != self.heads
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            out = self._math(q, k, v, future)
        b, _, s, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class Mlp(nn.Module):
    """GeLU (tanh form, GPT-2's `gelu_new`) MLP, or SwiGLU when the model is gated."""

    def __init__(self, m: Transformer):
        super().__init__()
        self.gated = m.gated_mlp
        self.up_proj = nn.Linear(m.hidden, m.ffn_hidden, bias=m.mlp_bias)
        if self.gated:
            self.gate_proj = nn.Linear(m.hidden, m.ffn_hidden, bias=m.mlp_bias)
        self.down_proj = nn.Linear(m.ffn_hidden, m.hidden, bias=m.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, m: Transformer, attention: str):
        super().__init__()
        self.norm1, self.attn = _norm(m), Attention(m, attention)
        self.norm2, self.mlp = _norm(m), Mlp(m)

    def forward(self, x: torch.Tensor, rotary: Rotary | None, future: torch.Tensor):
        x = x + self.attn(self.norm1(x), rotary, future)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """A decoder-only language model for sequences of exactly `seq_len` tokens."""

    def __init__(self, m: Transformer, seq_len: int, attention: str = "sdpa"):
        super().__init__()
        if attention not in ATTENTION:
            raise ValueError(f"attention(={attention!r}) must be one of {ATTENTION}")
        if m.position == "rope" and m.head_dim % 2:
            raise ValueError(f"rotary positions need an even head_dim (got {m.head_dim})")
        self.embed = nn.Embedding(m.vocab, m.hidden)
        self.pos = nn.Embedding(m.max_positions, m.hidden) if m.position == "learned" else None
        self.rotary = Rotary(m.head_dim, seq_len) if m.position == "rope" else None
        self.layers = nn.ModuleList(Block(m, attention) for _ in range(m.layers))
        self.norm = _norm(m)
        self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)
        if m.tied_embeddings:
            self.lm_head.weight = self.embed.weight
        # True where a query would see a later key: the causal mask of the eager attention.
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy; logits are upcast to fp32 for the loss, as HF does."""
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x, self.rotary, self.future)
        logits = self.lm_head(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


# --- measuring --------------------------------------------------------------------------------


def storage_key(t: torch.Tensor) -> tuple[str, int]:
    """Identifies the storage behind `t`: views and tied tensors share it."""
    return (str(t.device), t.untyped_storage().data_ptr())


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`, each counted once."""
    return sum({storage_key(t): t.untyped_storage().nbytes() for t in tensors}.values())


class Optimizers:
    """Several torch optimizers stepped as one (Muon's matrices, AdamW's rest)."""

    def __init__(self, parts: list[torch.optim.Optimizer]):
        self.parts = parts

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for part in self.parts:
            part.step()

    @property
    def state(self) -> dict:
        return {k: v for part in self.parts for k, v in part.state.items()}


def make_optimizer(name: str, named: list[tuple[str, nn.Parameter]]) -> Any:
    """The PyTorch optimizer the registry (state/optimizers.py) builds for `name`."""
    with quiet_imports():  # bitsandbytes' and torchao's first import: groundtruth/quiet_imports.py
        parts = optimizer(name).build(torch, named, lr=1e-4)
    return parts[0] if len(parts) == 1 else Optimizers(parts)


# per optimizer, not per parameter value: Adam's scalar `step` counters, and bitsandbytes' two
# 256-value fp32 quantisation maps (Optimizer2State: one `dynamic` map every tensor shares)
APART = ("step", "qmap1", "qmap2")


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    """(per-parameter state, what is reported apart: scalar `step` counters and shared
    quantisation maps) in bytes."""
    state, counters = [], []
    for per_param in optimizer.state.values():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                (counters if key in APART else state).append(value)
    return storage_bytes(state), storage_bytes(counters)


class LayerWatch:
    """Which transformer layer is running (`current`: its index; -1 outside every layer), for
    `torch.autograd.graph.saved_tensors_hooks`: subclasses count what `pack` is given; `unpack`
    hands the tensor back as it was saved."""

    current = -1

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def watch(self, layers: nn.ModuleList) -> list[Any]:
        """Forward hooks on each layer; returns their handles (call `.remove()` when done)."""
        handles = []
        for i, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(lambda *_, i=i: self._enter(i)))
            handles.append(layer.register_forward_hook(lambda *_: self._enter(-1)))
        return handles

    def _enter(self, index: int) -> None:
        self.current = index


class SavedTensors(LayerWatch):
    """Storages autograd saves for backward, each counted once, by the layer that saved it first.

    Use `pack`/`unpack` with `torch.autograd.graph.saved_tensors_hooks`; `watch(layers)` adds
    forward hooks that say which layer is running (index; -1 outside every layer). Storages of
    `excluded` tensors (parameters, buffers) are not activations and are never counted.
    """

    def __init__(self, layers: int, excluded: Iterable[torch.Tensor]):
        self.excluded = {storage_key(t) for t in excluded}
        self.per_layer = [0] * layers
        self.outside = 0
        self.current = -1
        self._seen: set[tuple[str, int]] = set()

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key not in self.excluded and key not in self._seen:
            self._seen.add(key)
            nbytes = t.untyped_storage().nbytes()
            if self.current < 0:
                self.outside += nbytes
            else:
                self.per_layer[self.current] += nbytes
        return t  # holding the tensor keeps its storage (and address) alive until backward


def train_step(
    net: Decoder,
    optimizer: torch.optim.Optimizer,
    ids: list[torch.Tensor],
    saved: SavedTensors | None = None,
) -> None:
    """Forward, backward and optimizer step; with `saved`, record what autograd retains."""
    optimizer.zero_grad(set_to_none=False)  # gradients stay resident, as tiersim counts them
    if saved is None:
        loss = net(ids[0], ids[1])
    else:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            loss = net(ids[0], ids[1])
    loss.backward()
    optimizer.step()
