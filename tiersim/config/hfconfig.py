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

from tiersim.core import limits
from tiersim.core.errors import shown
from tiersim.core.files import FileProblem, read_regular_file

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2")
MAX_SIZE = 2**40  # the scenario schema's bound on a size (schema.PositiveInt)
_REQUIRED = object()  # a `default` meaning "no default: the key must be given"
_INTEGER = "expected a positive integer, written without a decimal point"
_PATH = "expected a path to a config.json file, or to a model folder holding one"


class HfConfigError(ValueError):
    """A config.json that is missing, malformed or of an unsupported model type."""


def _shown(value: Any) -> str:
    """A value as the file writes it (JSON: true, null, "false", NaN), shortened."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _size(cfg: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """A positive JSON integer at `key`; absent or null gives `default`, if there is one."""
    value = cfg.get(key)
    if value is None and default is not _REQUIRED:
        return default
    if key not in cfg:
        raise HfConfigError(f"{key}: required key is missing ({_INTEGER})")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise HfConfigError(f"{key}: is {_shown(value)} ({_INTEGER}, at most 2**40)")
    return value


def _switch(cfg: dict[str, Any], key: str, default: bool) -> bool:
    """JSON true or false at `key`; absent or null gives the family's default."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        expected = f"true or false, or null for the default, {_shown(default)}"
        raise HfConfigError(f"{key}: is {_shown(value)} (expected {expected})")
    return value


def _probability(cfg: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability at `key`: a JSON number in [0, 1); absent or null: the default."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise HfConfigError(f"{key}: is {_shown(value)} (expected a probability, 0 <= p < 1)")
    return float(value)


def _divides(key: str, value: int, of_key: str, of: int, hint: str = "") -> None:
    if of % value:
        raise HfConfigError(
            f"{key}: {value} does not divide {of_key} ({of}) (expected a divisor of {of}{hint})"
        )


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = _size(cfg, "n_embd"), _size(cfg, "n_head")
    _divides("n_head", heads, "n_embd", hidden)  # GPT2Attention refuses anything else
    return {
        "family": "gpt2",
        "layers": _size(cfg, "n_layer"),
        "hidden": hidden,
        "heads": heads,
        "ffn_hidden": _size(cfg, "n_inner", 4 * hidden),
        "vocab": _size(cfg, "vocab_size"),
        "max_positions": _size(cfg, "n_positions"),
        "tied_embeddings": _switch(cfg, "tie_word_embeddings", True),
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
        "norm": "layernorm",
        "position": "learned",
        # GPT2Config's defaults; embd_pdrop is taken as resid_pdrop (tiersim has one hidden p)
        "attention_dropout": _probability(cfg, "attn_pdrop", 0.1),
        "hidden_dropout": _probability(cfg, "resid_pdrop", 0.1),
    }


def _attention(cfg: dict[str, Any]) -> dict[str, Any]:
    """Heads, key/value heads (grouped-query attention) and the head width."""
    hidden, heads = _size(cfg, "hidden_size"), _size(cfg, "num_attention_heads")
    kv_heads = _size(cfg, "num_key_value_heads", heads)  # null: multi-head, as in LlamaConfig
    _divides("num_key_value_heads", kv_heads, "num_attention_heads", heads)
    head_dim = _size(cfg, "head_dim", None)
    if head_dim is None:
        _divides("num_attention_heads", heads, "hidden_size", hidden, ", or give head_dim")
    dims = {"hidden": hidden, "heads": heads, "kv_heads": kv_heads}
    return {**dims, "head_dim": head_dim} if head_dim else dims


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
    attention_bias = _switch(cfg, "attention_bias", False)
    return {
        "qkv_bias": attention_bias,
        "attn_out_bias": attention_bias,
        "mlp_bias": _switch(cfg, "mlp_bias", False),
    }


def _llama_like(cfg: dict[str, Any], family: str) -> dict[str, Any]:
    return {
        "family": family,
        "layers": _size(cfg, "num_hidden_layers"),
        **_attention(cfg),
        "ffn_hidden": _size(cfg, "intermediate_size"),
        "vocab": _size(cfg, "vocab_size"),
        "max_positions": _size(cfg, "max_position_embeddings", None),
        "gated_mlp": True,
        "tied_embeddings": _switch(cfg, "tie_word_embeddings", False),
        **_biases(cfg, family),
        "norm": "rmsnorm",
        "position": "rope",
        "attention_dropout": _probability(cfg, "attention_dropout", 0.0),
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
    raise HfConfigError(
        f"unsupported model_type {shown(model_type)} (supported: {', '.join(SUPPORTED)}; "
        "for other models give the dimensions explicitly)"
    )


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object, refusing a key given twice (json.loads would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            both = f"{_shown(out[key])}, then {_shown(value)}"
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
        raise HfConfigError(f"is {got.get(type(value), _shown(value))} ({_PATH})")
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
        raise HfConfigError(f"{path} {exc}{hint}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = getattr(exc, "strerror", None) or exc
        raise HfConfigError(f"cannot read {path}: {reason}") from None
    try:
        return path, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HfConfigError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def read_hf_config(path: Path) -> dict[str, Any]:
    """The `model` keys of the config.json at `path` (or in the folder `path`)."""
    path, text = _read_text(path)
    try:
        return dims_from_config(_parse(text))
    except HfConfigError as exc:  # what is wrong inside the file: name the file
        raise HfConfigError(f"{path}: {exc}") from None
