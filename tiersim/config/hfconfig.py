"""Read a Hugging Face `config.json` (offline) into tiersim's transformer dimensions.

Every value read is checked first, as strictly as the model's `transformers` class uses it:
sizes are JSON integers >= 1, switches JSON `true` or `false`; an absent key or `null` takes
the family's default where its config class has one. Anything else is refused naming the key
(`bool("false")` is true, and `num_key_value_heads: 0` is not multi-head attention).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiersim.config import hfmeta
from tiersim.config.hffamilies import FAMILIES, read_family
from tiersim.config.hfvalues import (
    HfConfigError,
    HfConfigFileError,
    attention_dims,
    divides,
    probability_at,
    shown,
    size_at,
    switch_at,
)
from tiersim.core import limits
from tiersim.core.errors import shown as shown_repr
from tiersim.core.files import FileProblem, read_regular_file

__all__ = ["HfConfigError", "config_file", "dims_from_config", "hf_config_path", "read_hf_config"]

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2", *FAMILIES)
_SUPPORTED_SHORT = (  # every family, spelled short enough for a one-line message
    " ".join(SUPPORTED)
    .replace("deepseek_v2 deepseek_v3", "deepseek_v2/v3")
    .replace("qwen2_moe qwen3_moe", "qwen2/3_moe")
)
_INTEGER = "expected a positive integer, written without a decimal point"
_PATH = "expected a path to a config.json file, or to a model folder holding one"


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = size_at(cfg, "n_embd"), size_at(cfg, "n_head")
    divides("n_head", heads, "n_embd", hidden)  # GPT2Attention refuses anything else
    return {
        "family": "gpt2",
        "layers": size_at(cfg, "n_layer"),
        "hidden": hidden,
        "heads": heads,
        "ffn_hidden": size_at(cfg, "n_inner", 4 * hidden),
        "vocab": size_at(cfg, "vocab_size"),
        "max_positions": size_at(cfg, "n_positions"),
        "tied_embeddings": switch_at(cfg, "tie_word_embeddings", True),
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
        "norm": "layernorm",
        "position": "learned",
        # GPT2Config's defaults; embd_pdrop is taken as resid_pdrop (tiersim has one hidden p)
        "attention_dropout": probability_at(cfg, "attn_pdrop", 0.1),
        "hidden_dropout": probability_at(cfg, "resid_pdrop", 0.1),
    }


# Mistral's and Qwen2's modules hard-code `bias=` and never read `attention_bias` or `mlp_bias`
# (transformers' modular_mistral.py, modular_qwen2.py): Qwen2 has q/k/v biases, Mistral none.
_FIXED_BIASES = {
    "mistral": {"qkv_bias": False, "attn_out_bias": False, "mlp_bias": False},
    "qwen2": {"qkv_bias": True, "attn_out_bias": False, "mlp_bias": False},
}


def _biases(cfg: dict[str, Any], family: str) -> dict[str, bool]:
    """Llama's `attention_bias` covers q/k/v and o, `mlp_bias` gate, up and down."""
    if family in _FIXED_BIASES:
        return _FIXED_BIASES[family]
    attention_bias = switch_at(cfg, "attention_bias", False)
    return {
        "qkv_bias": attention_bias,
        "attn_out_bias": attention_bias,
        "mlp_bias": switch_at(cfg, "mlp_bias", False),
    }


def _llama_like(cfg: dict[str, Any], family: str) -> dict[str, Any]:
    return {
        "family": family,
        "layers": size_at(cfg, "num_hidden_layers"),
        **attention_dims(cfg),
        "ffn_hidden": size_at(cfg, "intermediate_size"),
        "vocab": size_at(cfg, "vocab_size"),
        "max_positions": size_at(cfg, "max_position_embeddings", None),
        "gated_mlp": True,
        "tied_embeddings": switch_at(cfg, "tie_word_embeddings", False),
        **_biases(cfg, family),
        "norm": "rmsnorm",
        "position": "rope",
        "attention_dropout": probability_at(cfg, "attention_dropout", 0.0),
        "hidden_dropout": 0.0,  # the Llama, Mistral and Qwen2 modelling code has no other dropout
    }


def dims_from_config(cfg: Any) -> dict[str, Any]:
    """Map a parsed config.json to the `model` keys of a scenario."""
    if not isinstance(cfg, dict):
        raise HfConfigError("not a JSON object")
    model_type = cfg.get("model_type")
    if model_type == "gpt2":
        return _gpt2(cfg)
    if model_type in ("llama", "mistral", "qwen2"):
        return _llama_like(cfg, model_type)
    if model_type in FAMILIES:
        return read_family(cfg, model_type)
    if hfmeta.known(model_type):  # counted by transformers itself, as a generic model
        return hfmeta.dims_from_transformers(cfg)
    raise HfConfigError(_unsupported(model_type))


def _unsupported(model_type: Any) -> str:
    """Why a model_type is refused: none of the named families, and not one transformers counts
    (the installed one does not know it, or the measure extra is not installed). Kept short: a
    problem is one line, the path twice and a 60-character echo of the value besides."""
    named = f"unsupported model_type {shown_repr(model_type)} (known: {_SUPPORTED_SHORT}"
    if hfmeta.available():
        version = hfmeta.transformers_version()
        return (
            f"{named}, and any model_type transformers {version} knows; else give the dimensions)"
        )
    return (
        f"{named}, and any model_type transformers knows once installed: pip install -e "
        "'.[measure]'; else give the dimensions)"
    )


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object, refusing a key given twice (json.loads would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            both = f"{shown(out[key])}, then {shown(value)}"
            raise HfConfigError(f"{key}: given twice ({both}; expected each key once)")
        out[key] = value
    return out


def _integer(text: str) -> int:
    """A JSON integer, refused past INT_DIGITS digits (Python will not convert 4,300 or more)."""
    digits = len(text.lstrip("-"))
    if digits > limits.INT_DIGITS:
        what = f"an integer of {digits:,} digits"
        raise HfConfigError(f"{what} ({_INTEGER} of at most {limits.INT_DIGITS} digits)")
    return int(text)


def _parse(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique, parse_int=_integer)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
        raise HfConfigError(f"not valid JSON ({where})") from None
    except RecursionError:  # json's reader stops at the interpreter's recursion limit
        raise HfConfigError(
            "nested too deeply to read (a config.json is an object of numbers and strings, "
            "1-3 levels deep)"
        ) from None


def hf_config_path(value: Any, base_dir: Path) -> Path:
    """`model.hf_config` as a path, relative to the scenario file's folder."""
    if not isinstance(value, str) or not value.strip():
        got = {str: "empty", type(None): "null", list: "a list", dict: "a mapping"}
        raise HfConfigError(f"is {got.get(type(value), shown(value))} ({_PATH})")
    path = Path(value)
    return path if path.is_absolute() else base_dir / path


def config_file(path: Path) -> Path:
    """`path`, or the config.json in it where it is a folder (as `from_pretrained` reads one)."""
    if not path.is_dir():
        return path
    if not (path / "config.json").exists():
        raise HfConfigError(f"{path} is a folder with no config.json in it ({_PATH})")
    return path / "config.json"


def _read_text(path: Path) -> tuple[Path, str]:
    """The config.json's path (the one in `path`, if that is a folder) and its text."""
    try:
        path = config_file(path)
        data = read_regular_file(path, limits.JSON_BYTES.value(), "a config.json file")
    except HfConfigError:
        raise
    except FileProblem as exc:
        hint = f"; {limits.JSON_BYTES.env} raises the bound" if "larger" in str(exc) else ""
        raise HfConfigFileError(f"{path}: {exc}{hint}") from None
    except FileNotFoundError:
        raise HfConfigFileError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = getattr(exc, "strerror", None) or exc
        raise HfConfigFileError(f"{path}: cannot read: {reason}") from None
    try:
        return path, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HfConfigFileError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def read_hf_config(path: Path) -> dict[str, Any]:
    """The `model` keys of the config.json at `path` (or in the folder `path`)."""
    path, text = _read_text(path)
    try:
        return dims_from_config(_parse(text))
    except HfConfigError as exc:  # what is wrong inside the file: name the file
        raise HfConfigError(f"{path}: {exc}") from None
