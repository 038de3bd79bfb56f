"""Real `transformers` models (GPT-2, Llama, Mistral, Qwen2, Mixtral, Qwen2-MoE, DeepSeek-V3:
groundtruth/hfdeepseek.py) built from
tiersim's dimensions, random weights, nothing downloaded, and one measured training step on them.

The model's parameter tensors are those tiersim counts (GPT-2's fused c_attn holds q, k and v
in one tensor: the same values). What autograd saves is recorded per storage, each once; a
storage saved by more than one layer (Llama's rotary cos and sin, computed once by the model)
counts outside the layers, as tiersim.state.activations does. Training runs without a KV cache
(`use_cache=False`, as training loops pass it): GPT-2 with a cache keeps K and V copies more.

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import transformers
from torch import nn

from tiersim.groundtruth.hfdeepseek import deepseek_config, deepseek_fits
from tiersim.groundtruth.quiet_imports import quiet_import
from tiersim.groundtruth.torchmodels import LayerWatch, storage_key
from tiersim.state.activations import Accounting, hf_style, hf_unsupported
from tiersim.state.model import Transformer

# transformers' model code imports torchao wherever it is installed, whose first import logs
# its unloadable CUDA extensions and PyTorch's Enum deprecation: done here, quietly, before any
# model is built (the measuring modules import this module before groundtruth/selective.py)
quiet_import("transformers.modeling_utils")

KERNELS = {"eager": "eager", "sdpa": "sdpa"}  # transformers' attn_implementation names
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "deepseek_v3")


def _biases_fit(m: Transformer, family: str) -> bool:
    """Mistral has no biases, Qwen2 q/k/v biases only; Llama's attention_bias covers q, k, v
    and o together and mlp_bias the MLP."""
    biases = (m.qkv_bias, m.attn_out_bias, m.mlp_bias)
    if family == "mistral":
        return not any(biases)
    if family == "qwen2":
        return biases == (True, False, False)
    return m.qkv_bias == m.attn_out_bias


def family_of(m: Transformer, family: str | None) -> str:
    """The transformers class that builds exactly this model (the named family where it can),
    or ValueError saying why none does."""
    if hf_style(m) == "gpt2":
        gpt2 = m.qkv_bias and m.attn_out_bias and m.mlp_bias and not m.gated_mlp
        if not gpt2 or m.position != "learned" or m.head_dim * m.heads != m.hidden:
            raise ValueError(
                "a LayerNorm model is built as GPT-2, which has biases everywhere, a GeLU MLP, "
                "learned positions and head_dim = hidden / heads"
            )
        return "gpt2"
    if m.position != "rope" or not m.gated_mlp:
        raise ValueError("an RMSNorm model is built as Llama, with rotary positions and SwiGLU")
    if m.mla is not None:
        return deepseek_fits(m)
    if m.moe is not None:
        return _mixtral_fits(m)
    for name in (family, "llama", "qwen2"):
        if name in FAMILIES[1:] and _biases_fit(m, name):
            return name
    raise ValueError(
        "no transformers family has these biases (Llama's attention_bias covers q, k, v and o "
        "together; Qwen2 has q, k, v biases only)"
    )


def _mixtral_fits(m: Transformer) -> str:
    """An MoE model is built as Mixtral (every layer MoE, no shared experts, no biases) or,
    with one gated shared expert, as Qwen2-MoE (q, k, v biases as the model says, dense
    layers as its mlp_only_layers); both dropless (activations_moe says what else their
    accounting needs)."""
    moe = m.moe
    assert moe is not None
    if hf_unsupported(m):
        raise ValueError(f"transformers' MoE families do not build {hf_unsupported(m)}")
    if moe.groups is not None:
        raise ValueError(
            "DeepSeek-V3's grouped router is built with latent attention (kv_lora_rank)"
        )
    if moe.shared:
        if moe.shared != 1 or not moe.shared_gate or m.attn_out_bias or m.mlp_bias:
            raise ValueError(
                "a mixture-of-experts model with shared experts is built as Qwen2-MoE: one "
                "gated shared expert, biases on q, k and v only"
            )
        return "qwen2_moe"
    if not all(m.is_moe(i) for i in range(m.layers)):
        raise ValueError(
            "a mixture-of-experts model without shared experts is built as Mixtral: every "
            "layer MoE, dropless (no capacity factor)"
        )
    if any((m.qkv_bias, m.attn_out_bias, m.mlp_bias)):
        raise ValueError("a mixture-of-experts model is built as Mixtral, which has no biases")
    return "mixtral"


def _decoder(m: Transformer, acc: Accounting, seq_len: int) -> dict[str, Any]:
    """The config keys every Llama-style family names alike."""
    return {
        "hidden_size": m.hidden,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim,
        "num_hidden_layers": m.layers,
        "vocab_size": m.vocab,
        "max_position_embeddings": max(m.max_positions or seq_len, seq_len),
        "attention_dropout": acc.attention_dropout,
        "tie_word_embeddings": m.tied_embeddings,
    }


def _qwen2_moe_config(m: Transformer, acc: Accounting, seq_len: int) -> Any:
    """Qwen2-MoE's config: its layers not MoE as mlp_only_layers, top-k weights not
    renormalised (its configs' norm_topk_prob false), no router logits (no auxiliary loss),
    the experts on transformers' default grouped_mm path (the accounting's)."""
    assert m.moe is not None
    cfg = transformers.Qwen2MoeConfig(
        **_decoder(m, acc, seq_len),
        intermediate_size=m.ffn_hidden,
        moe_intermediate_size=m.moe.ffn_hidden,
        shared_expert_intermediate_size=m.moe.shared_ffn_hidden,
        num_experts=m.moe.experts,
        num_experts_per_tok=m.moe.per_token,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[i for i in range(m.layers) if not m.is_moe(i)],
        qkv_bias=m.qkv_bias,
        output_router_logits=False,
    )
    cfg._experts_implementation = "grouped_mm"
    return cfg


def _mixtral_config(m: Transformer, acc: Accounting, seq_len: int) -> Any:
    """Mixtral's config; router jitter off and no router logits (no auxiliary loss), the
    experts on transformers' default grouped_mm path (the accounting's)."""
    assert m.moe is not None
    cfg = transformers.MixtralConfig(
        **_decoder(m, acc, seq_len),
        intermediate_size=m.moe.ffn_hidden,
        num_local_experts=m.moe.experts,
        num_experts_per_tok=m.moe.per_token,
        router_jitter_noise=0.0,
        output_router_logits=False,
    )
    cfg._experts_implementation = "grouped_mm"
    return cfg


def hf_config(m: Transformer, family: str, acc: Accounting, seq_len: int) -> Any:
    if family == "deepseek_v3":
        return deepseek_config(m, acc, seq_len)
    if family == "mixtral":
        return _mixtral_config(m, acc, seq_len)
    if family == "qwen2_moe":
        return _qwen2_moe_config(m, acc, seq_len)
    if family == "gpt2":
        return transformers.GPT2Config(
            n_embd=m.hidden,
            n_head=m.heads,
            n_layer=m.layers,
            n_positions=max(m.max_positions or seq_len, seq_len),
            n_inner=m.ffn_hidden,
            vocab_size=m.vocab,
            attn_pdrop=acc.attention_dropout,
            resid_pdrop=acc.hidden_dropout,
            embd_pdrop=acc.hidden_dropout,
            tie_word_embeddings=m.tied_embeddings,
            bos_token_id=None,
            eos_token_id=None,
        )
    cls = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
    }[family]
    extra = {"attention_bias": m.qkv_bias, "mlp_bias": m.mlp_bias} if family == "llama" else {}
    return cls(**_decoder(m, acc, seq_len), intermediate_size=m.ffn_hidden, **extra)


def build(m: Transformer, family: str, acc: Accounting, seq_len: int, dtype: Any) -> nn.Module:
    transformers.logging.set_verbosity_error()  # config notes about random, tiny models
    cfg = hf_config(m, family, acc, seq_len)
    cfg._attn_implementation = KERNELS[acc.kernel]
    cls = transformers.GPT2LMHeadModel if family == "gpt2" else transformers.AutoModelForCausalLM
    if family == "deepseek_v3":  # in its dtype as loaded: the router's weight stays fp32
        net = cls.from_config(cfg, dtype=dtype)
        net.config._attn_implementation = KERNELS[acc.kernel]
        return net.train()
    net = cls(cfg) if family == "gpt2" else cls.from_config(cfg)
    net.config._attn_implementation = KERNELS[acc.kernel]
    return net.to(dtype).train()


def layers_of(net: nn.Module) -> nn.ModuleList:
    return net.transformer.h if hasattr(net, "transformer") else net.model.layers


class _Held:
    """A saved tensor as autograd's graph holds it: alive while the graph node that saved it."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedStorages(LayerWatch):
    """Each storage autograd saves, once, with the layers that saved it (-1: outside).
    `drop_freed()`, called while the forward's output is alive, forgets what the graph has
    already let go: a node off the loss's path dies with its outputs (DeepSeek-V3's router
    saves group indices and a mask for a top-k whose values nothing differentiates)."""

    def __init__(self, layers: int, excluded: list[torch.Tensor]):
        self.layers = layers
        self.excluded = {storage_key(t) for t in excluded}
        self.records: list[tuple[Any, tuple[str, int], int, int]] = []
        self.current = -1

    def pack(self, t: torch.Tensor) -> Any:
        key = storage_key(t)
        if key in self.excluded:
            return t
        held = _Held(t)
        nbytes = t.untyped_storage().nbytes()
        self.records.append((weakref.ref(held), key, nbytes, self.current))
        return held

    @staticmethod
    def unpack(t: Any) -> torch.Tensor:
        return t.tensor if isinstance(t, _Held) else t

    def drop_freed(self) -> None:
        self.records = [r for r in self.records if r[0]() is not None]

    @property
    def seen(self) -> dict[tuple[str, int], tuple[int, set[int]]]:
        out: dict[tuple[str, int], tuple[int, set[int]]] = {}
        for _, key, nbytes, layer in self.records:
            out.setdefault(key, (nbytes, set()))[1].add(layer)
        return out

    @property
    def per_layer(self) -> list[int]:
        out = [0] * self.layers
        for nbytes, where in self.seen.values():
            if len(where) == 1 and min(where) >= 0:
                out[min(where)] += nbytes
        return out

    @property
    def outside(self) -> int:
        return sum(n for n, where in self.seen.values() if len(where) > 1 or min(where) < 0)


def train_step(net: nn.Module, optimizer: Any, ids: Any, saved: SavedStorages | None) -> None:
    optimizer.zero_grad(set_to_none=False)
    if saved is None:
        loss = net(input_ids=ids, labels=ids, use_cache=False).loss
    else:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            loss = net(input_ids=ids, labels=ids, use_cache=False).loss
        saved.drop_freed()  # what backward will find
    loss.backward()
    optimizer.step()


def run(m: Transformer, family: str, acc: Accounting, req: Any, seq: int, device: str) -> dict:
    """Warm-up and measured step of the transformers model; bytes of every class."""
    from tiersim.groundtruth import torchmodels as tm

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[req.dtype]
    shape = (req.micro_batch_size, seq)
    rng_devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=rng_devices), torch.device(device):
        torch.manual_seed(req.seed)
        net = build(m, family, acc, seq, dtype)
        ids = torch.randint(0, m.vocab, shape)
    if req.recompute != "none":  # as the scenario asks (measure --scenario)
        from tiersim.groundtruth.selective import set_recompute

        set_recompute(net, req.recompute, KERNELS[acc.kernel])
    params = list(net.parameters())
    optimizer = tm.make_optimizer(req.optimizer, list(net.named_parameters()))
    train_step(net, optimizer, ids, None)  # warm-up: creates the optimizer state
    saved = SavedStorages(m.layers, [*params, *net.buffers()])
    handles = saved.watch(layers_of(net))
    state, counters = tm.optimizer_bytes(optimizer)
    grads = tm.storage_bytes(p.grad for p in params if p.grad is not None)
    before = tm.storage_bytes(params) + grads + state  # what the recorded step starts with
    peak = _recorded_peak(lambda: train_step(net, optimizer, ids, saved), device, before)
    for h in handles:
        h.remove()
    per_layer, outside = saved.per_layer, saved.outside
    return {
        "parameters": sum(p.numel() for p in params),
        "measured": {
            "weights": tm.storage_bytes(params),
            "gradients": tm.storage_bytes(p.grad for p in params if p.grad is not None),
            "master": 0,
            "optimizer": state,
            "activations": sum(per_layer) + outside,
        },
        "per_layer": per_layer,
        "outside": outside,
        "counters": counters,
        "peak": peak,
    }


def _recorded_peak(step: Any, device: str, before: int) -> int:
    """The step's peak allocated bytes: on a GPU the allocator's own figure; on the CPU
    `before` plus the profiler's memory events in order (groundtruth/step_peaks.py)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    from tiersim.groundtruth.quiet_profiler import memory_profile
    from tiersim.groundtruth.step_peaks import measured_peaks

    with memory_profile() as prof:
        step()
    return measured_peaks(prof, before).peak_bytes
