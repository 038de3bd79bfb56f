"""Any other architecture `transformers` knows: its parameters counted exactly by building the
model on PyTorch's meta device (shapes only: no weights, no download, no remote code), mapped
onto a generic model of that many parameters over its layers.

Only with the `measure` extra (torch and transformers) installed; without it, or for a
model_type transformers does not know, the config.json is refused as before. What maps: the
exact total, the number of blocks in the model's largest layer list (its decoder or encoder
layers) and `hidden_size`. What is then approximated: every layer holds total / layers
parameters (embeddings and head included), forward FLOPs are 2 per parameter per token, and
activations are 0 B unless `model.activation_bytes_per_layer` is given (the table says so).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from tiersim.config.hfvalues import HfConfigError


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _build(cfg: dict[str, Any]):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    fields = {k: v for k, v in cfg.items() if k not in ("auto_map", "quantization_config")}
    config = transformers.AutoConfig.for_model(**fields)
    with torch.device("meta"):
        try:
            return config, transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:  # not a causal LM (an encoder, an encoder-decoder): the bare model
            return config, transformers.AutoModel.from_config(config)


def _layers(model: Any) -> int:
    """Blocks in the model's largest list of modules (its layers)."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return max((len(m) for m in lists), default=1) or 1


def known(model_type: Any) -> bool:
    if not isinstance(model_type, str) or not available():
        return False
    import transformers

    return model_type in transformers.CONFIG_MAPPING


def dims_from_transformers(cfg: dict[str, Any]) -> dict[str, Any]:
    """The generic `model` keys of a config.json transformers can build (see `known`)."""
    try:
        config, model = _build(cfg)
    except Exception as exc:
        raise HfConfigError(
            f"model_type {cfg['model_type']!r}: transformers cannot build it "
            f"({_first_line(exc)}; expected a config.json transformers accepts)"
        ) from None
    total = sum(p.numel() for p in model.parameters())  # shared tensors once
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", None)
    out = {
        "family": f"{cfg['model_type']} (transformers, meta device)",
        "parameters": total,
        "layers": _layers(model),
    }
    if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0:
        out["hidden"] = hidden
    return out
