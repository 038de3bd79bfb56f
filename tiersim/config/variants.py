"""Checks across the `model` keys of layers that are not all alike: mixture-of-experts layers,
multi-head latent attention and sliding-window layers. Each message says what to change."""

from __future__ import annotations

from typing import Any

# keys that mean something only for a mixture-of-experts model, with their dense defaults
_MOE_ONLY = {
    "expert_ffn_hidden": None,
    "shared_experts": 0,
    "shared_expert_ffn_hidden": None,
    "shared_expert_gate": False,
    "expert_groups": None,
    "expert_groups_per_token": None,
    "first_dense_layers": 0,
    "moe_every": 1,
    "dense_layers": (),
    "capacity_factor": None,
}
_MLA_DIMS = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
# every layer-variant key with its default: a model with all of these is all-alike layers
VARIANT_DEFAULTS: dict[str, Any] = {
    "qk_norm": False,
    "post_norms": False,
    "q_lora_rank": None,
    "kv_lora_rank": None,
    **dict.fromkeys(_MLA_DIMS),
    "sliding_window": None,
    "sliding_window_layers": None,
    "experts": None,
    "experts_per_token": None,
    **_MOE_ONLY,
}


# what the huggingface accounting and `tiersim measure` know of MoE: Mixtral's block (every
# layer MoE, no shared experts, dropless); any other MoE key is refused with them
MIXTRAL_VARIANTS = ("experts", "experts_per_token", "expert_ffn_hidden")
# DeepSeek-V3's latent attention, which the huggingface accounting knows (activations_mla)
MLA_VARIANTS = ("q_lora_rank", "kv_lora_rank", *_MLA_DIMS)


def given_variants(spec: Any) -> list[str]:
    """The layer-variant keys `spec` sets to other than their defaults."""
    return _given(spec, VARIANT_DEFAULTS)


def _given(spec: Any, defaults: dict[str, Any]) -> list[str]:
    return [key for key, default in defaults.items() if getattr(spec, key) != default]


def _check_moe(spec: Any) -> None:
    if spec.experts is None:
        stray = _given(spec, {"experts_per_token": None, **_MOE_ONLY})
        if stray:
            raise ValueError(
                f"{', '.join(stray)} given without 'experts' (give the routed experts per MoE "
                "layer, or leave these out for a dense model)"
            )
        return
    k = spec.experts_per_token
    if k is None:
        raise ValueError(
            "'experts' needs 'experts_per_token' (the experts each token is routed to)"
        )
    if k > spec.experts:
        raise ValueError(f"experts_per_token ({k}) is more than experts ({spec.experts})")
    if spec.first_dense_layers > spec.layers:
        raise ValueError(
            f"first_dense_layers ({spec.first_dense_layers}) is more than layers ({spec.layers})"
        )
    _check_indices(spec, "dense_layers", spec.dense_layers)
    _check_groups(spec)


def _check_groups(spec: Any) -> None:
    """DeepSeek-V3's router: the experts split into equal groups of at least two (it sums each
    group's two best scores), k experts chosen among the best groups' experts."""
    groups, best = spec.expert_groups, spec.expert_groups_per_token
    if groups is None:
        if best is not None:
            raise ValueError("expert_groups_per_token given without 'expert_groups'")
        return
    if spec.experts % groups or spec.experts // groups < 2:
        raise ValueError(
            f"expert_groups ({groups}) must divide experts ({spec.experts}) into groups of at "
            "least 2 (DeepSeek-V3's router sums each group's two best scores)"
        )
    best = best or 1
    if best > groups or spec.experts_per_token > best * spec.experts // groups:
        raise ValueError(
            f"expert_groups_per_token ({best}) must be at most expert_groups ({groups}) and "
            f"its groups hold at least experts_per_token ({spec.experts_per_token}) experts"
        )


def _check_indices(spec: Any, key: str, indices: tuple[int, ...] | None) -> None:
    bad = [i for i in indices or () if i >= spec.layers]
    if bad:
        raise ValueError(
            f"{key} names layer {bad[0]}, past the last (expected indices 0 to {spec.layers - 1})"
        )


def _check_attention(spec: Any) -> None:
    if spec.kv_lora_rank is None:
        stray = [k for k in ("q_lora_rank", *_MLA_DIMS) if getattr(spec, k) is not None]
        if stray:
            raise ValueError(
                f"{', '.join(stray)} given without 'kv_lora_rank' (multi-head latent attention "
                "needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim)"
            )
    else:
        missing = [k for k in _MLA_DIMS if getattr(spec, k) is None]
        if missing:
            raise ValueError(
                f"multi-head latent attention (kv_lora_rank) also needs {', '.join(missing)}"
            )
    if spec.sliding_window_layers is not None and spec.sliding_window is None:
        raise ValueError("sliding_window_layers given without 'sliding_window' (its width)")
    _check_indices(spec, "sliding_window_layers", spec.sliding_window_layers)


def check_layer_variants(spec: Any) -> None:
    """Raise ValueError for the first inconsistency among the layer-variant keys of `spec`."""
    _check_moe(spec)
    _check_attention(spec)
