"""Megatron-Bridge configs as the Megatron-LM argument list they stand for: a YAML's sections
(`bridge_flags`), and a Python recipe (src/megatron/bridge/recipes/<family>/<model>.py) read
without running it: the recipe function's `cfg.<section>.<key> = <value>` statements, as the
YAML of the same sections (frameworks/megatron.py maps the flags).

A recipe is Python; tiersim never imports or executes it (a config file must not run code).
What it reads, from the function's own body in order:
- `cfg.<section>.<key> = VALUE` where VALUE is a literal, a module-level constant the file
  assigns a literal (`SEQUENCE_LENGTH_16K: int = 16384`), or `torch.<dtype>`;
- `cfg.model = AutoBridge.from_hf_pretrained("<org>/<name>")...`: the model, taken as the
  tiersim preset of that name where one exists (else a note: give --hf-config);
- `cfg.mixed_precision = "<recipe>"` (or `<recipe>()`): Bridge's precision recipes by name
  (bf16_mixed, fp16_mixed, bf16_with_fp8_<scaling>_mixed, bf16_with_mxfp8_mixed).
Any other statement (a helper call, a condition, a value computed at run time) is named in a
note with its line; nothing is dropped silently. Keys the function does not set take
Megatron-LM's defaults, not `_pretrain_common()`'s (said in a note, as for a Bridge YAML).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from tiersim.core.errors import InputError, Problem
from tiersim.frameworks.arglist import Flag
from tiersim.frameworks.mapping import Mapped

# Bridge's mixed-precision recipe names (megatron/bridge/training/mixed_precision.py) -> the
# Bridge YAML `mixed_precision:` keys the importer maps (fp8 -> --fp8-format, fp8_recipe)
_FP8_SCALING = {
    "delayed_scaling": "delayed",
    "current_scaling": "tensorwise",
    "subchannel_scaling": "blockwise",
}


@dataclass
class Recipe:
    """The sections a recipe function sets, the model it names, and what was not read."""

    function: str
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    hf_model: str | None = None
    notes: list[Problem] = field(default_factory=list)


def looks_like_recipe(text: str) -> bool:
    return bool(re.search(r"^def \w+\(", text, re.M)) and bool(re.search(r"\bcfg\.\w+", text))


def read_recipe(text: str, source: str, function: str | None) -> Recipe:
    """The recipe `function` of the Python file `text` (default: its only function named
    *pretrain_config)."""
    try:
        module = ast.parse(text, filename=source)
    except SyntaxError as exc:
        why = f"not valid Python (line {exc.lineno}: {exc.msg})"
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")]) from None
    except (RecursionError, ValueError, MemoryError):
        raise InputError(source, [Problem("", "not readable as Python", "E-IMPORT-FILE")]) from None
    body = _chosen(module, source, function)
    recipe = Recipe(body.name)
    constants = _constants(module)
    for statement in body.body:
        _statement(statement, constants, recipe)
    return recipe


def _chosen(module: ast.Module, source: str, function: str | None) -> ast.FunctionDef:
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    if function is not None:
        if function not in functions:
            known = ", ".join(sorted(functions)) or "none"
            why = f"has no function {function!r} (expected one of: {known})"
            raise InputError(source, [Problem("--recipe", why, "E-OPTION")])
        return functions[function]
    recipes = sorted(n for n in functions if n.endswith("pretrain_config"))
    if len(recipes) == 1:
        return functions[recipes[0]]
    listed = ", ".join(recipes[:12]) + (" ..." if len(recipes) > 12 else "")
    why = f"holds {len(recipes)} recipe functions (expected one named with --recipe NAME" + (
        f": {listed})" if recipes else "; none is named *pretrain_config)"
    )
    raise InputError(source, [Problem("--recipe", why, "E-OPTION")])


def _constants(module: ast.Module) -> dict[str, Any]:
    """Module-level NAME = literal (or NAME: type = literal)."""
    out: dict[str, Any] = {}
    for node in module.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            ok, value = _literal(node.value, out)
            if ok:
                out[target.id] = value
    return out


def _literal(node: ast.AST, constants: dict[str, Any]) -> tuple[bool, Any]:
    if isinstance(node, ast.Name) and node.id in constants:
        return True, constants[node.id]
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    ):
        return True, node.attr  # torch.bfloat16 -> "bfloat16"
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _statement(node: ast.stmt, constants: dict[str, Any], recipe: Recipe) -> None:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return  # the docstring
    if isinstance(node, ast.Return) or _is_common_base(node):
        return
    path = _target(node)
    if path is None:
        why = "a condition (neither branch read)" if isinstance(node, ast.If) else ""
        _skipped(node, recipe, why or "not a cfg.<section>.<key> = value statement")
        return
    value = node.value  # type: ignore[attr-defined]
    if len(path) == 1:
        _whole_section(path[0], value, node, recipe)
        return
    section, key = path[0], ".".join(path[1:])
    ok, literal = _literal(value, constants)
    if not ok:
        _skipped(node, recipe, "its value is computed when the recipe runs")
        return
    recipe.sections.setdefault(section, {})[key] = literal


def _is_common_base(node: ast.stmt) -> bool:
    """`cfg = _pretrain_common()` (or a ConfigContainer(...)): the base container, whose keys
    the recipe does not set take Megatron-LM's defaults here."""
    if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
        return False
    call = node.value
    name = getattr(getattr(call, "func", None), "id", "") if isinstance(call, ast.Call) else ""
    return "common" in name or name == "ConfigContainer"


def _target(node: ast.stmt) -> list[str] | None:
    """cfg.a.b = ... -> ["a", "b"] (the root name is the recipe's container)."""
    if not isinstance(node, ast.Assign | ast.AnnAssign) or getattr(node, "value", None) is None:
        return None
    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
    parts: list[str] = []
    while isinstance(target, ast.Attribute):
        parts.insert(0, target.attr)
        target = target.value
    return parts if isinstance(target, ast.Name) and parts else None


def _whole_section(section: str, value: ast.AST, node: ast.stmt, recipe: Recipe) -> None:
    if section == "model":
        model = _hf_model(value)
        if model is None:
            _skipped(node, recipe, "a model provider tiersim cannot read (give --hf-config)")
        recipe.hf_model = model
        return
    if section == "mixed_precision":
        name = value.value if isinstance(value, ast.Constant) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            name = value.func.id
        precision = _precision(name) if isinstance(name, str) else None
        if precision is None:
            _skipped(node, recipe, "a mixed-precision recipe tiersim does not know")
        else:
            recipe.sections["mixed_precision"] = precision
        return
    _skipped(node, recipe, "a whole section built when the recipe runs")


def _hf_model(value: ast.AST) -> str | None:
    """The repository id in AutoBridge.from_hf_pretrained("org/name") (anywhere in a call
    chain such as .to_megatron_provider(load_weights=False))."""
    for node in ast.walk(value):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_hf_pretrained"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
    return None


def _precision(name: str) -> dict[str, Any] | None:
    """bf16_mixed, fp16_mixed, bf16_with_fp8_<scaling>_mixed, bf16_with_mxfp8_mixed."""
    match = re.fullmatch(r"(bf16|fp16)(?:_with_(fp8_\w+?|mxfp8))?_mixed", name)
    if match is None:
        return None
    out: dict[str, Any] = {match.group(1): True}
    fp8 = match.group(2)
    if fp8 == "mxfp8":
        out.update({"fp8": "hybrid", "fp8_recipe": "mxfp8"})
    elif fp8 is not None:
        scaling = _FP8_SCALING.get(fp8.removeprefix("fp8_"))
        if scaling is None:
            return None
        out.update({"fp8": "hybrid", "fp8_recipe": scaling})
    return out


def _skipped(node: ast.stmt, recipe: Recipe, why: str) -> None:
    text = ast.unparse(node).splitlines()[0].rstrip(":")
    shown = text if len(text) <= 80 else text[:77] + "..."
    recipe.notes.append(
        Problem(f"line {node.lineno}", f"{shown}: {why} (left out)", "W-IMPORT-UNMAPPED")
    )


def preset_for(hf_model: str, presets: set[str]) -> str | None:
    """The tiersim model preset named like a Hugging Face repository: org/Meta-Llama-3-8B ->
    llama-3-8b, Llama-2-7b-hf -> llama-2-7b, Qwen/Qwen3-8B -> qwen3-8b."""
    name = hf_model.rsplit("/", 1)[-1].lower().removeprefix("meta-")
    for candidate in (name, re.sub(r"-(hf|v\d[\w.]*|base)$", "", name)):
        if candidate in presets:
            return candidate
    return None


def bridge_flags(cfg: dict[str, Any], out: Mapped, origins: dict[str, str]) -> list[Flag]:
    """A Megatron-Bridge config's sections (model:, train:, ddp:, optimizer: ...) as the
    argument list it stands for: key_name -> --key-name, true -> the flag alone, false or
    null -> absent (each named in a note)."""
    flags = []
    why = (
        "a Megatron-Bridge config: a key it leaves out takes Megatron-LM's default here, not "
        "the recipe's it overrides (give those keys, or --set them)"
    )
    out.note("(config)", why)
    renamed = {"optimizer.optimizer": "optimizer", "mixed_precision.fp8": "fp8-format"}
    for section, body in cfg.items():
        if section == "mixed_precision" and isinstance(body, str) and _precision(body):
            # ConfigContainer.mixed_precision takes a recipe's name too (`bf16_mixed`), as a
            # recipe's `cfg.mixed_precision = "bf16_mixed"` does: the same keys
            body = _precision(body)
        elif section == "mixed_precision" and isinstance(body, str):
            why = (
                "a mixed-precision recipe tiersim does not know (bf16_mixed, fp16_mixed, "
                "bf16_with_fp8_<scaling>_mixed, bf16_with_mxfp8_mixed): fp32, Megatron-LM's default"
            )
            out.unmapped(section, body, why)
            continue
        if not isinstance(body, dict):
            out.unmapped(str(section), body)
            continue
        for key, value in body.items():
            path = f"{section}.{key}"
            name = renamed.get(path, str(key).replace("_", "-"))
            origins[f"--{name}"] = path
            if value is None or value is False:
                out.note(path, f"{'null' if value is None else 'false'}: as absent")
            elif value is True:
                flags.append(Flag(name, (), 0))
            elif isinstance(value, list | tuple):
                flags.append(Flag(name, tuple(str(v) for v in value), 0))
            elif isinstance(value, dict):
                out.unmapped(path, value)
            else:
                flags.append(Flag(name, (str(value),), 0))
    return flags
