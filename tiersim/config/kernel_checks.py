"""Checks of the kernel model's keys against the machine and the model: an FP8 recipe needs
a measured rate, `training.compile` a layer whose eager and compiled kernels are counted."""

from __future__ import annotations

from pathlib import Path

from tiersim.config.presets import is_preset_file, load_preset
from tiersim.config.schema import Scenario
from tiersim.config.yamlfile import read_yaml
from tiersim.core.errors import Problem


def _table_recipes(name: str) -> dict:
    """A kernel table's FP8 recipes, its base table's where it gives none."""
    raw = read_yaml(Path(name), name) if is_preset_file(name) else load_preset("kernels", name)
    if "fp8_recipes" in raw or "base" not in raw:
        return raw.get("fp8_recipes", {})
    return _table_recipes(raw["base"])


def fp8_problems(s: Scenario) -> list[Problem]:
    """FP8 linears need an FP8 rate: the GPU's peak_flops.fp8, and where it has a kernel
    table, a measured rate for the recipe (tiersim/presets/kernels)."""
    fp8, gpu = s.training.fp8, s.hardware.gpu
    if fp8 is None:
        return []
    if "fp8" not in gpu.peak_flops:
        have = ", ".join(gpu.peak_flops) or "none"
        what = f"FP8 linears need hardware.gpu.peak_flops.fp8 (this GPU gives: {have})"
        return [Problem("training.fp8", what, "E-KERNEL")]
    if gpu.kernels is None:
        return []
    recipes = _table_recipes(gpu.kernels)
    if fp8.recipe in recipes:
        return []
    what = (
        f"'{fp8.recipe}': kernel table {gpu.kernels} has no measured FP8 GEMM rate for this "
        f"recipe (expected one of: {', '.join(recipes) or 'none'}; docs/kernels.md)"
    )
    return [Problem("training.fp8.recipe", what, "E-KERNEL")]


def compile_problems(s: Scenario) -> list[Problem]:
    """`training.compile`'s eager and compiled kernels are counted for transformers'
    Llama-style layer (workload/eager.py): huggingface code, RMSNorm, rotary, gated MLP."""
    t, m = s.training, s.model
    if t.compile is None:
        return []
    other = [
        what
        for what, given in (
            (f"implementation {t.implementation}", t.implementation != "huggingface"),
            ("no gated MLP", not m.gated_mlp),
            (f"norm {m.norm}", m.norm != "rmsnorm"),
            (f"position {m.position}", m.position != "rope"),
            ("mixture-of-experts", m.experts is not None),
        )
        if given
    ]
    if not other:
        return []
    what = (
        f"{str(t.compile).lower()}: eager and compiled kernels are counted for a Llama-style "
        f"layer in transformers' code (implementation huggingface, RMSNorm, rotary positions, "
        f"a gated MLP), and the scenario has {', '.join(other)} (expected the key left out)"
    )
    return [Problem("training.compile", what, "E-KERNEL")]
