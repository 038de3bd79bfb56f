"""Read a Hugging Face `config.json` (offline) into tiersim's transformer dimensions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2")


class HfConfigError(ValueError):
    """A config.json that is missing, malformed or of an unsupported model type."""


def _require(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise HfConfigError(f"config.json has no '{key}'")
    return cfg[key]


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    hidden = _require(cfg, "n_embd")
    return {
        "family": "gpt2",
        "layers": _require(cfg, "n_layer"),
        "hidden": hidden,
        "heads": _require(cfg, "n_head"),
        "ffn_hidden": cfg.get("n_inner") or 4 * hidden,
        "vocab": _require(cfg, "vocab_size"),
        "max_positions": _require(cfg, "n_positions"),
        "tied_embeddings": cfg.get("tie_word_embeddings", True),
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
        "norm": "layernorm",
        "position": "learned",
    }


def _llama_like(cfg: dict[str, Any], family: str) -> dict[str, Any]:
    heads = _require(cfg, "num_attention_heads")
    attention_bias = bool(cfg.get("attention_bias", False))
    dims = {
        "family": family,
        "layers": _require(cfg, "num_hidden_layers"),
        "hidden": _require(cfg, "hidden_size"),
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "ffn_hidden": _require(cfg, "intermediate_size"),
        "vocab": _require(cfg, "vocab_size"),
        "max_positions": cfg.get("max_position_embeddings"),
        "gated_mlp": True,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        # Qwen2 puts biases on q/k/v only; Llama's `attention_bias` covers q/k/v and o.
        "qkv_bias": family == "qwen2" or attention_bias,
        "attn_out_bias": attention_bias,
        "mlp_bias": bool(cfg.get("mlp_bias", False)),
        "norm": "rmsnorm",
        "position": "rope",
    }
    if cfg.get("head_dim"):
        dims["head_dim"] = cfg["head_dim"]
    return dims


def _integers(cfg: dict[str, Any]) -> None:
    """Sizes must be JSON integers ("768" or 768.0 would be read as something else)."""
    for key in (
        "n_embd",
        "n_layer",
        "n_head",
        "n_inner",
        "n_positions",
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "max_position_embeddings",
        "head_dim",
    ):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise HfConfigError(f"config.json '{key}' is {value!r} (expected an integer)")


def dims_from_config(cfg: Any) -> dict[str, Any]:
    """Map a parsed config.json to the `model` keys of a scenario."""
    if not isinstance(cfg, dict):
        raise HfConfigError("config.json is not a JSON object")
    _integers(cfg)
    model_type = cfg.get("model_type")
    if model_type == "gpt2":
        return _gpt2(cfg)
    if model_type in ("llama", "mistral", "qwen2"):
        return _llama_like(cfg, model_type)
    raise HfConfigError(
        f"unsupported model_type {model_type!r} (supported: {', '.join(SUPPORTED)}; "
        "for other models give the dimensions explicitly)"
    )


def read_hf_config(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HfConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise HfConfigError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HfConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return dims_from_config(cfg)
