"""Checks of the kernel model's keys against the machine and the model: an FP8 recipe needs
a measured rate, a kernel table's sustained and FP8 quantize shares are shares,
`training.compile` a layer whose eager and compiled kernels are counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiersim.config.fp8 import FP8_RECIPES, TORCHAO_ONLY
from tiersim.config.presets import is_preset_file, read_preset
from tiersim.config.schema import Scenario
from tiersim.config.yamlfile import read_yaml
from tiersim.core.errors import Problem


def table_value(name: str, key: str, default: Any = None) -> Any:
    """A kernel table's top-level `key`, its base table's where it gives none."""
    raw = read_yaml(Path(name), name) if is_preset_file(name) else read_preset("kernels", name)
    if key in raw or "base" not in raw:
        return raw.get(key, default)
    return table_value(raw["base"], key, default)


def _table_recipes(name: str) -> dict:
    """A kernel table's FP8 recipes, its base table's where it gives none."""
    return table_value(name, "fp8_recipes", {})


def fp8_compute_problems(s: Scenario) -> list[Problem]:
    """FP8 training is `training.fp8`, not an FP8 compute copy: Transformer Engine and torchao
    run the linear layers' GEMMs in FP8 and keep the weights' compute copy, attention and
    the activations (but the FP8 inputs TE's linears save) in BF16 (docs/fp8.md). An FP8
    compute copy would run every GEMM, attention's included, at the FP8 peak with FP8
    activations, which no framework does: refused."""
    precision = s.training.precision
    if precision.compute_precision != "fp8":
        return []
    key = "compute" if precision.compute is not None else "weights"
    what = (
        "fp8 as the layers' compute copy is not a training mode (FP8 training runs the linear "
        "layers' GEMMs in FP8, the compute copy and attention in bf16): expected "
        "training.fp8: {recipe: ...} with training.precision.compute bf16 (or unset with "
        "bf16 weights); docs/fp8.md"
    )
    return [Problem(f"training.precision.{key}", what, "E-KERNEL")]


def fp8_problems(s: Scenario) -> list[Problem]:
    """FP8 is `training.fp8` alone, its linears need an FP8 rate, and a kernel table's FP8
    quantize shares are shares."""
    rate = _fp8_rate_problems(s) + quantize_share_problems(s)
    torchao = _torchao_recipe_problems(s) + _torchao_attention_problems(s)
    return fp8_compute_problems(s) + _fp8_gather_problems(s) + torchao + rate


def _torchao_attention_problems(s: Scenario) -> list[Problem]:
    """FP8 under `framework: fsdp` is torchao's Float8Linear (torchtitan's float8 converter,
    state/fp8_casts.py), which swaps the linear layers alone: attention's products run in the
    compute precision there, so `attention: true` (timed as FP8 GEMMs) is no such run."""
    tr = s.training
    if tr.fp8 is None or not tr.fp8.attention or tr.framework != "fsdp":
        return []
    what = (
        "true under framework fsdp: FP8 there is torchao's Float8Linear (torchtitan's float8 "
        "converter), which converts the linear layers alone, attention's products staying in "
        "the compute precision; expected attention: false (docs/fp8.md)"
    )
    return [Problem("training.fp8.attention", what, "E-CONFLICT")]


def _torchao_recipe_problems(s: Scenario) -> list[Problem]:
    """rowwise_with_gw_hp is torchao's (torchtitan's float8 `recipe_name`): Transformer
    Engine, what Megatron runs FP8 with, has no such recipe."""
    tr = s.training
    if tr.fp8 is None or tr.fp8.recipe not in TORCHAO_ONLY or tr.framework == "fsdp":
        return []
    # a framework left out is tiersim's generic engine, not Python's None
    under = f"framework {tr.framework}" if tr.framework else "no training.framework"
    what = (
        f"'{tr.fp8.recipe}' under {under}: a torchao recipe (torchtitan's "
        "Float8Linear), run under framework fsdp alone; expected framework: fsdp, or another "
        "recipe (tensorwise, delayed, rowwise, blockwise, mxfp8); docs/fp8.md"
    )
    return [Problem("training.fp8.recipe", what, "E-CONFLICT")]


def _fp8_gather_problems(s: Scenario) -> list[Problem]:
    """`param_gather` under `framework: fsdp` is torchao's `enable_fsdp_float8_all_gather`,
    which torchao 0.18.0 allows with tensorwise scaling alone (torchao/float8/config.py,
    `Float8LinearConfig.__post_init__`: "enable_fsdp_float8_all_gather only supports
    tensorwise scaling granularity")."""
    tr = s.training
    if tr.fp8 is None or not tr.fp8.param_gather or tr.framework != "fsdp":
        return []
    if tr.fp8.recipe == "tensorwise":
        return []
    what = (
        f"true with recipe {tr.fp8.recipe} under framework fsdp: torchao's FP8 all-gather "
        "(enable_fsdp_float8_all_gather) takes tensorwise scaling only; expected "
        "training.fp8.recipe: tensorwise, or param_gather: false; docs/fp8.md"
    )
    return [Problem("training.fp8.param_gather", what, "E-CONFLICT")]


def _fp8_rate_problems(s: Scenario) -> list[Problem]:
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
    if fp8.gemm_kernel in recipes:
        return []
    if not recipes:  # 'expected one of: none' read as a recipe named none (not one)
        what = (
            f"'{fp8.recipe}': kernel table {gpu.kernels} measures no FP8 GEMM at all (expected "
            "a table with FP8 rates, or FP8 training off: training.fp8 left out, "
            "--set training.fp8=null; docs/kernels.md)"
        )
        return [Problem("training.fp8.recipe", what, "E-KERNEL")]
    what = (
        f"'{fp8.recipe}': kernel table {gpu.kernels} has no measured FP8 GEMM rate for this "
        f"recipe (expected one of: {', '.join(recipes)}; docs/kernels.md)"
    )
    return [Problem("training.fp8.recipe", what, "E-KERNEL")]


# The dtypes a table's rates are kept by (tiersim/hardware/kernel_tables.py TABLE_DTYPE's
# values: fp16 is looked up as bf16): a share under another key would never be read.
SUSTAINED_DTYPES = ("bf16", "fp8")


def _is_share(value: Any) -> bool:
    """A number in (0, 1]; YAML's true and false are not numbers here (bool is an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1


# a kernel table's top-level keys (tiersim/hardware/kernel_tables.py reads them), and those
# that hold measured rates (or inherit them)
TABLE_KEYS = (
    "gemm",
    "attention",
    "grouped_gemm",
    "fp8_recipes",
    "fp8_quantize",
    "sustained",
    "base",
    "name",
    "compute_capability",
)
MEASURED_KEYS = ("gemm", "attention", "grouped_gemm", "base")


def _table_file_problems(kernels: str) -> list[Problem]:
    """A table file's keys: the loader reads the keys it knows and ignores the rest, so a model
    preset or a misspelt file given as `hardware.gpu.kernels` ran as no table, without a word
    (gpt2 on dgx-h100: 8.85 ms a step, where h100-sxm's table gives 8.38 ms)."""
    raw = read_yaml(Path(kernels), kernels)
    unknown = [str(k) for k in raw if k not in TABLE_KEYS]
    if not unknown and any(k in raw for k in MEASURED_KEYS):
        return []
    hints = [f"'{k}'" + _close_key(k) for k in unknown[:6]] + (["..."] if len(unknown) > 6 else [])
    keys = "its key {} is" if len(unknown) == 1 else "its keys {} are"
    got = keys.format(", ".join(hints)) + " no kernel table's" if unknown else "no measured rates"
    beside = [k for k in TABLE_KEYS if k not in MEASURED_KEYS]
    what = (
        f"{kernels}: not a kernel table: {got} (expected measured rates under gemm, attention "
        f"or grouped_gemm, or a base table, beside {', '.join(beside)}, as tiersim calibrate "
        "--kernels-out writes them; docs/kernels.md)"
    )
    return [Problem("hardware.gpu.kernels", what, "E-KERNEL")]


def _close_key(key: str) -> str:
    import difflib  # a name refused: a valid file never needs it

    close = difflib.get_close_matches(key, TABLE_KEYS, n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def sustained_problems(s: Scenario) -> list[Problem]:
    """A table file that is a kernel table at all; then a kernel table's `sustained` shares
    (tiersim/hardware/kernel_tables.py), the share of each dtype's best isolated rate a GPU
    holds under load: numbers in (0, 1]."""
    kernels = s.hardware.gpu.kernels
    if kernels is not None and is_preset_file(kernels) and (wrong := _table_file_problems(kernels)):
        return wrong
    meaning = "the share of each dtype's best isolated rate held under load"
    return _share_problems(s, "sustained", SUSTAINED_DTYPES, meaning, ("dtype", "bf16"))


def quantize_share_problems(s: Scenario) -> list[Problem]:
    """A kernel table's `fp8_quantize` shares are the share of HBM bandwidth each FP8
    recipe's quantize kernels reach: numbers in (0, 1] by recipe."""
    meaning = "the share of HBM bandwidth an FP8 recipe's quantize kernels reach"
    return _share_problems(s, "fp8_quantize", FP8_RECIPES, meaning, ("recipe", "delayed"))


def _share_problems(
    s: Scenario, key: str, keys: tuple[str, ...], meaning: str, unit: tuple[str, str]
) -> list[Problem]:
    """The table's `key`: a number in (0, 1] under each of `keys`, shown as written if not."""
    kernels = s.hardware.gpu.kernels
    if kernels is None:
        return []
    shares = table_value(kernels, key, {})
    if isinstance(shares, dict):
        bad = {k: v for k, v in shares.items() if not _is_share(v) or k not in keys}
    else:  # a share not under a key (sustained: 0.9, [1]): shown as written
        bad = shares
    if bad == {}:
        return []
    named = f"{', '.join(keys[:-1])} and {keys[-1]}"
    what = (
        f"kernel table {kernels}: {key} {bad!r}: expected {meaning}, a number in (0, 1] by "
        f"{unit[0]}, the {unit[0]}s {named} (e.g. {key}: {{{unit[1]}: 0.9}})"
    )
    return [Problem("hardware.gpu.kernels", what, "E-KERNEL")]


COUNTED_CODE = ("huggingface", "torchtitan")  # whose eager and compiled bytes are counted


def compile_problems(s: Scenario) -> list[Problem]:
    """`training.compile`'s eager and compiled kernels are counted for transformers' and
    torchtitan's Llama-style layer (workload/eager.py): RMSNorm, rotary, gated MLP."""
    t, m = s.training, s.model
    if t.compile is None:
        return []
    other = [
        what
        for what, given in (
            (f"implementation {t.implementation}", t.implementation not in COUNTED_CODE),
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
        f"layer in transformers' or torchtitan's code (implementation huggingface or "
        f"torchtitan, RMSNorm, rotary positions, a gated MLP), and the scenario has "
        f"{', '.join(other)} (expected the key left out)"
    )
    return [Problem("training.compile", what, "E-KERNEL")]
