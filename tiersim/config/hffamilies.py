"""config.json readers for the mixture-of-experts and newer dense families, each read the way
its `transformers` 5 class reads it (configuration_*.py and modeling_*.py of mixtral,
qwen2_moe, qwen3_moe, qwen3, deepseek_v2, deepseek_v3, gemma2, gemma3_text, phi3).

The five sizes every family has (num_hidden_layers, hidden_size, num_attention_heads,
vocab_size and, where a dense MLP uses it, intermediate_size) must be given: `transformers`
would silently build its default model around a file that lacks one. Every other key takes
its class's default when absent (Qwen2-MoE's 16 key/value heads, Qwen3's head_dim of 128,
Gemma's 4), and null only where the class maps None to something (else it breaks on it, or
its strict validation refuses it, and so do we).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiersim.config.hfvalues import (
    HfConfigError,
    class_size,
    divides,
    index_list,
    probability_at,
    shown,
    size_at,
    switch_at,
)

Reader = Callable[[dict[str, Any]], dict[str, Any]]


def _core(cfg: dict[str, Any], family: str, max_positions: int) -> dict[str, Any]:
    return {
        "family": family,
        "layers": size_at(cfg, "num_hidden_layers"),
        "hidden": size_at(cfg, "hidden_size"),
        "heads": size_at(cfg, "num_attention_heads"),
        "vocab": size_at(cfg, "vocab_size"),
        "max_positions": class_size(cfg, "max_position_embeddings", max_positions),
        "gated_mlp": True,
        "norm": "rmsnorm",
        "position": "rope",
        # every family's attention dropout; none of them has another (phi3's resid_pdrop aside)
        "attention_dropout": probability_at(cfg, "attention_dropout", 0.0),
        "hidden_dropout": 0.0,
    }


def _kv_heads(cfg: dict[str, Any], heads: int, absent: int | None, null_heads: bool) -> int:
    """num_key_value_heads: absent is the class default (None: the heads); null is the heads
    where the class's __post_init__ maps None so, and refused where the class breaks on it."""
    if null_heads and "num_key_value_heads" in cfg and cfg["num_key_value_heads"] is None:
        return heads
    kv = class_size(cfg, "num_key_value_heads", absent or heads)
    divides("num_key_value_heads", kv, "num_attention_heads", heads)
    return kv


def _head_dim(cfg: dict[str, Any], dims: dict[str, Any], absent: int | None, null_ok: bool) -> int:
    """head_dim: absent (or null, where the class reads it with `or`) takes `absent`, or
    hidden // heads where that is None, as `getattr(config, "head_dim", ...)` does."""
    if "head_dim" in cfg and (cfg["head_dim"] is not None or not null_ok):
        return class_size(cfg, "head_dim", 1)
    if absent is not None:
        return absent
    if dims["hidden"] < dims["heads"]:
        raise HfConfigError(
            f"num_attention_heads: {dims['heads']} is more than hidden_size ({dims['hidden']}), "
            "so hidden_size // num_attention_heads is 0 (expected fewer heads, or give head_dim)"
        )
    return dims["hidden"] // dims["heads"]


def _attention(
    cfg: dict[str, Any],
    dims: dict[str, Any],
    kv: tuple[int | None, bool],
    head: int | None,
    null_head: bool = False,
    bias: bool | None = None,
) -> dict[str, Any]:
    """Key/value heads (absent default, null is the heads), head width, and `attention_bias`
    over q, k, v and o (bias None: the family has no such key and no biases)."""
    out = {
        "kv_heads": _kv_heads(cfg, dims["heads"], *kv),
        "head_dim": _head_dim(cfg, dims, head, null_head),
    }
    attention_bias = False if bias is None else _switch(cfg, "attention_bias", bias)
    return {**out, "qkv_bias": attention_bias, "attn_out_bias": attention_bias}


def _switch(cfg: dict[str, Any], key: str, default: bool) -> bool:
    """JSON true or false; absent is the class default, null refused (strict validation)."""
    if key in cfg and cfg[key] is None:
        raise HfConfigError(f"{key}: is null (expected true or false; absent is {shown(default)})")
    return switch_at(cfg, key, default)


def _tied(cfg: dict[str, Any], default: bool) -> dict[str, bool]:
    return {"tied_embeddings": _switch(cfg, "tie_word_embeddings", default)}


def _layer_types(cfg: dict[str, Any], layers: int) -> list[bool] | None:
    types = cfg.get("layer_types")
    if types is None:
        return None
    names = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in names for t in types):
        raise HfConfigError(
            f"layer_types: is {shown(types)} (expected a list of {layers} "
            "'sliding_attention' or 'full_attention')"
        )
    return [t == "sliding_attention" for t in types]


def _windows(
    cfg: dict[str, Any], layers: int, pattern: list[bool], default: int | None = None
) -> dict[str, Any]:
    """The sliding window (null or absent with no `default`: none) and the layers using it:
    `layer_types` where the family reads it (`pattern` None: it does not), else `pattern`."""
    if cfg.get("sliding_window", default) is None:
        return {}
    window = class_size(cfg, "sliding_window", default or 1)
    sliding = tuple(i for i, s in enumerate(_layer_types(cfg, layers) or pattern) if s)
    return {"sliding_window": window, "sliding_window_layers": sliding} if sliding else {}


def _experts(cfg: dict[str, Any], keys: tuple[str, str], default: int) -> tuple[str, int]:
    """The routed experts under the family's key or its config class's alias (attribute_map:
    Mixtral's num_experts, DeepSeek-V3's num_local_experts, ...); both given must agree. Only
    Qwen's MoE layers fall back to a dense MLP with 0 experts (Mixtral's and DeepSeek's would
    have no routed MLP at all), so only there is 0 accepted."""
    given = [k for k in keys if k in cfg]
    zero = keys[0] == "num_experts"
    values = {k: class_size(cfg, k, default, zero=zero) for k in given}
    if len(set(values.values())) > 1:
        a, b = given
        raise HfConfigError(
            f"{b}: is {values[b]}, but {a} is {values[a]} (the same setting under two names: "
            "expected one, or both alike)"
        )
    key = given[0] if given else keys[0]
    return key, values.get(key, default)


def _moe_core(cfg, keys: tuple[str, ...], experts: int, per_token: int, width: int) -> dict:
    key, n = _experts(cfg, keys if len(keys) == 2 else (keys[0], keys[0]), experts)
    k = class_size(cfg, "num_experts_per_tok", per_token)  # checked even where unused
    if n == 0:
        return {}
    if k > n:
        raise HfConfigError(f"num_experts_per_tok: {k} is more than {key} ({n})")
    return {"experts": n, "experts_per_token": k, "expert_ffn_hidden": width}


# --- the families ------------------------------------------------------------------------------


def _mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    dims = _core(cfg, "mixtral", 4096 * 32)
    ffn = size_at(cfg, "intermediate_size")  # every expert's width; every layer is MoE
    moe = _moe_core(cfg, ("num_local_experts", "num_experts"), 8, 2, ffn)
    every = [True] * dims["layers"]
    return {
        **dims,
        **_attention(cfg, dims, (8, False), None, null_head=True),
        "ffn_hidden": ffn,
        **_tied(cfg, False),
        **moe,
        **_windows({k: v for k, v in cfg.items() if k != "layer_types"}, dims["layers"], every),
    }


def _qwen_moe_layers(cfg: dict[str, Any], layers: int) -> dict[str, Any]:
    every = class_size(cfg, "decoder_sparse_step", 1)
    return {"moe_every": every, "dense_layers": index_list(cfg, "mlp_only_layers", layers)}


def _qwen2_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    dims = _core(cfg, "qwen2_moe", 32768)
    bias = _switch(cfg, "qkv_bias", True)  # q, k, v only; o never has one
    width = class_size(cfg, "moe_intermediate_size", 1408)
    moe = _moe_core(cfg, ("num_experts",), 60, 4, width)
    if moe:
        shared = class_size(cfg, "shared_expert_intermediate_size", 5632)
        moe |= {"shared_experts": 1, "shared_expert_ffn_hidden": shared}
        moe |= {"shared_expert_gate": True, **_qwen_moe_layers(cfg, dims["layers"])}
    return {
        **dims,
        **_attention(cfg, dims, (16, False), None),
        "qkv_bias": bias,
        "ffn_hidden": class_size(cfg, "intermediate_size", 5632),
        **_tied(cfg, False),
        **moe,
    }


def _qwen3_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    dims = _core(cfg, "qwen3_moe", 32768)
    width = class_size(cfg, "moe_intermediate_size", 768)
    moe = _moe_core(cfg, ("num_experts", "num_local_experts"), 128, 8, width)
    if moe:
        moe |= _qwen_moe_layers(cfg, dims["layers"])
    return {
        **dims,
        **_attention(cfg, dims, (4, False), None, bias=False),
        "qk_norm": True,
        "ffn_hidden": class_size(cfg, "intermediate_size", 6144),
        **_tied(cfg, False),
        **moe,
    }


def _qwen3(cfg: dict[str, Any]) -> dict[str, Any]:
    dims = _core(cfg, "qwen3", 32768)
    return {
        **dims,
        **_attention(cfg, dims, (32, True), 128, bias=False),
        "qk_norm": True,
        "ffn_hidden": size_at(cfg, "intermediate_size"),
        **_tied(cfg, False),
    }


def _latent(cfg: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek's multi-head latent attention; q_lora_rank null is a plain q projection."""
    q_rank = None if cfg.get("q_lora_rank", 0) is None else class_size(cfg, "q_lora_rank", 1536)
    rope = class_size(cfg, "qk_rope_head_dim", 64)
    nope = class_size(cfg, "qk_nope_head_dim", 128)
    return {
        **({"q_lora_rank": q_rank} if q_rank else {}),
        "kv_lora_rank": class_size(cfg, "kv_lora_rank", 512),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": class_size(cfg, "v_head_dim", 128),
        "head_dim": nope + rope,  # each head's query and key width
    }


def _router_groups(cfg: dict[str, Any], experts: int, per_token: int) -> dict[str, int]:
    """DeepseekV3TopkRouter's expert groups (n_group, topk_group), where its routing can run
    them: equal groups of at least 2 experts, enough experts in the best groups. Otherwise
    none (the parameters are the same; the huggingface accounting then refuses the MoE)."""
    groups, best = class_size(cfg, "n_group", 8), class_size(cfg, "topk_group", 4)
    if experts % groups or experts // groups < 2 or best > groups:
        return {}
    if per_token > best * experts // groups:
        return {}
    return {"expert_groups": groups, "expert_groups_per_token": best}


def _deepseek(cfg: dict[str, Any], family: str, defaults: tuple[int, ...]) -> dict[str, Any]:
    experts, shared, width, first_dense, max_positions = defaults
    dims = _core(cfg, family, max_positions)
    if family == "deepseek_v2":  # DeepseekV2Config.validate_architecture
        divides("num_attention_heads", dims["heads"], "hidden_size", dims["hidden"])
    bias = _switch(cfg, "attention_bias", False)
    moe_width = class_size(cfg, "moe_intermediate_size", width)
    per_token = 8 if family == "deepseek_v3" else None
    if per_token is None and "num_experts_per_tok" not in cfg:
        size_at(cfg, "num_experts_per_tok")  # DeepseekV2Config's default None breaks routing
    alias = "num_local_experts" if family == "deepseek_v3" else "num_experts"
    moe = _moe_core(cfg, ("n_routed_experts", alias), experts, per_token or 1, moe_width)
    n_shared = class_size(cfg, "n_shared_experts", shared, zero=True)
    mlp_bias = _switch(cfg, "mlp_bias", False) if family == "deepseek_v2" else False
    if moe and mlp_bias and not n_shared:  # a zero-wide shared MLP that keeps its down bias
        raise HfConfigError(
            "n_shared_experts: is 0 with mlp_bias true (DeepseekV2 then builds an empty shared "
            "MLP with a down-projection bias, which tiersim does not model: expected >= 1)"
        )
    if moe and n_shared:
        moe |= {"shared_experts": n_shared, "shared_expert_ffn_hidden": moe_width}
    if moe and family == "deepseek_v3":
        moe |= _router_groups(cfg, moe["experts"], moe["experts_per_token"])
    if moe:
        moe["first_dense_layers"] = min(
            class_size(cfg, "first_k_dense_replace", first_dense, zero=True), dims["layers"]
        )
    return {
        **dims,
        "kv_heads": dims["heads"],
        **_latent(cfg),
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": mlp_bias,
        "ffn_hidden": size_at(cfg, "intermediate_size"),
        **_tied(cfg, False),
        **moe,
    }


def _gemma(cfg: dict[str, Any], family: str) -> dict[str, Any]:
    gemma3 = family == "gemma3_text"
    dims = _core(cfg, family, 131_072 if gemma3 else 8192)
    divides("num_attention_heads", dims["heads"], "hidden_size", dims["hidden"])
    pattern = class_size(cfg, "sliding_window_pattern", 6) if gemma3 else 2
    layers = dims["layers"]
    return {
        **dims,
        **_attention(cfg, dims, (4, False), 256, bias=False),
        "qk_norm": gemma3,
        "post_norms": True,
        "ffn_hidden": size_at(cfg, "intermediate_size"),
        **_tied(cfg, True),
        **_windows(cfg, layers, [bool((i + 1) % pattern) for i in range(layers)], 4096),
    }


def _phi3(cfg: dict[str, Any]) -> dict[str, Any]:
    dims = _core(cfg, "phi3", 4096)  # fused qkv_proj and gate_up_proj: the same tensors' sizes
    dims["hidden_dropout"] = probability_at(cfg, "resid_pdrop", 0.0)  # after attention and MLP
    return {
        **dims,
        **_attention(cfg, dims, (None, True), None),
        "ffn_hidden": size_at(cfg, "intermediate_size"),
        **_tied(cfg, False),
        **_windows(
            {k: v for k, v in cfg.items() if k != "layer_types"},
            dims["layers"],
            [True] * dims["layers"],
        ),
    }


FAMILIES: dict[str, Reader] = {
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "qwen3": _qwen3,
    "deepseek_v2": lambda cfg: _deepseek(cfg, "deepseek_v2", (64, 2, 1407, 0, 2048)),
    "deepseek_v3": lambda cfg: _deepseek(cfg, "deepseek_v3", (256, 1, 2048, 3, 4096)),
    "gemma2": lambda cfg: _gemma(cfg, "gemma2"),
    "gemma3_text": lambda cfg: _gemma(cfg, "gemma3_text"),
    "phi3": _phi3,
}


def read_family(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    return FAMILIES[model_type](cfg)
