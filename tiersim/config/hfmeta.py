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

import contextlib
import importlib.util
import inspect
import logging
from collections.abc import Iterator
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
    _refuse_defaulted_sizes(cfg, config)
    with torch.device("meta"), quiet_imports():
        try:
            return config, transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:  # not a causal LM (an encoder, an encoder-decoder): the bare model
            return config, transformers.AutoModel.from_config(config)


# Building a model makes transformers import torchao (the `measure` extra's 0.18.0), which
# logs "Failed to load ..." for its CUDA and CPython-3.10 kernels and makes torch warn of a
# deprecated pytree registration: four lines on standard error of a `run` that uses neither
# (shapes on the meta device). Quieted while the model is built, the levels given back after.
NOISY = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def quiet_imports(names: tuple[str, ...] = NOISY) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# the sizes the named families require (hffamilies.py); each under the config class's own name
# where its attribute_map renames it (GPT-2's n_layer, T5's num_layers)
_CORE_SIZES = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "vocab_size",
    "intermediate_size",
)


class DefaultedSizes(HfConfigError):
    """The file lacks core sizes its config class would fill with another model's defaults."""


def _refuse_defaulted_sizes(cfg: dict[str, Any], config: Any) -> None:
    """The rule of the named families for every model_type: a core size the class has a fixed
    default for must be in the file (a default derived from other keys, None in the class's
    signature, is the file's own: GPT-2's n_inner of 4 x n_embd)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    where, given = ("", cfg) if text is config else _section_of(cfg, config, text)
    params = inspect.signature(type(text).__init__).parameters
    renamed = getattr(type(text), "attribute_map", {}) or {}
    missing = []
    for key in _CORE_SIZES:
        name = renamed.get(key, key)
        param = params.get(name)
        if param is None or param.default is None or param.default is inspect.Parameter.empty:
            continue
        if given.get(key) is None and given.get(name) is None:
            missing.append((where + name, param.default))
    if missing:
        raise DefaultedSizes(_defaulted_message(missing, type(text).__name__))


def _section_of(cfg: dict[str, Any], config: Any, text: Any) -> tuple[str, dict[str, Any]]:
    """The file's part that holds the text model's keys (a composite's `text_config`), with
    the prefix that names its keys."""
    for name in getattr(config, "sub_configs", None) or {}:
        if getattr(config, name, None) is text:
            part = cfg.get(name)
            return f"{name}.", part if isinstance(part, dict) else {}
    return "", cfg


def _defaulted_message(missing: list[tuple[str, Any]], class_name: str) -> str:
    names = ", ".join(name for name, _ in missing)
    values = [repr(value) for _, value in missing]
    listed = values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"
    one = len(missing) == 1
    return (
        f"{names}: required key{' is' if one else 's are'} missing (transformers' {class_name} "
        f"would fill in its default{'' if one else 's'}, {listed}, the size{'' if one else 's'} "
        f"of some other model; expected {'it' if one else 'each'} in the file, as a positive "
        "integer, as for the named families)"
    )


def _layers(model: Any) -> int:
    """Blocks in the model's largest list of modules (its layers)."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return max((len(m) for m in lists), default=1) or 1


def transformers_version() -> str:
    """The installed transformers' version (call only where `available()`)."""
    import transformers

    return transformers.__version__


def known(model_type: Any) -> bool:
    if not isinstance(model_type, str) or not available():
        return False
    import transformers

    return model_type in transformers.CONFIG_MAPPING


def dims_from_transformers(cfg: dict[str, Any]) -> dict[str, Any]:
    """The generic `model` keys of a config.json transformers can build (see `known`)."""
    try:
        config, model = _build(cfg)
    except DefaultedSizes:
        raise
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
