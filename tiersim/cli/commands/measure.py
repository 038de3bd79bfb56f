"""`tiersim measure`: train real steps in PyTorch and compare each class of state with tiersim."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.cli.commands.common import add_format_arg, cannot_write, file_arg, usable_preset_path
from tiersim.cli.commands.measure_fsdp import run_fsdp
from tiersim.cli.commands.measure_request import in_scenario_terms, request, scenario_request
from tiersim.config.presets import is_preset_file
from tiersim.core.errors import InputError, Problem
from tiersim.core.open_lines import end_open_lines
from tiersim.core.units import fmt_bytes, fmt_count
from tiersim.groundtruth import choices

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.groundtruth.measure import Measurement, Request

EPILOG = """\
By default (--implementation huggingface) measure trains a transformers model (GPT-2, Llama,
Mistral, Qwen2, Mixtral, Qwen2-MoE or DeepSeek-V3 code, chosen by the model's norm, MLP, biases,
experts and attention) and predicts with
training.implementation huggingface for the device it runs on: every class, the layers and what
lies outside them, and the step's peak (on the CPU from the profiler's memory events).
With --implementation tiersim (tiersim's own modules; the default with --calibrate or --fsdp):
weights, gradients and optimizer state are the bytes of the real tensors and must equal
tiersim's prediction exactly (Adam's and Adafactor's 4-byte scalar `step` counters are reported
apart, not as optimizer state). Activations are the storages autograd saves for backward inside
the transformer layers, each counted once; tiersim predicts them with Korthikanti et al.'s
s*b*h*(34 + 5*a*s/h) bytes per layer (16-bit). Differences come from the implementation:
  - no dropout: the formula's dropout masks (2sbh) and attention dropout (3*a*s^2*b) are absent;
  - sdpa (flash) attention keeps no s x s softmax (2*a*s^2*b absent) but a 4*a*s*b fp32
    log-sum-exp; --attention math keeps an fp32 softmax and matmul copies instead;
  - LayerNorm keeps mean and 1/sigma; RMSNorm in bf16 computes in fp32 and keeps fp32 copies;
  - SwiGLU keeps four s*b*f tensors where the formula counts three; GeLU keeps two;
  - the formula counts elements in the compute precision (4 bytes in fp32), masks 1 byte.
--calibrate FILE (.yaml or .yml) writes a model preset with activation_factor = measured /
predicted, usable in a scenario as `model: {preset: FILE}` (a path relative to the scenario
file). A model shrunk with --set model.layers or model.vocab keeps the named model's dimensions
in the preset (the factor is per layer); one shrunk in any other dimension is written as
measured, and the file says it is not the named model.
--scenario FILE (a scenario, or one `tiersim import` wrote; --set applies to it as in `run`)
takes its model, seq_len, micro-batch, optimizer, compute precision (as --dtype), implementation
(megatron: tiersim's own modules; huggingface and torchtitan: transformers'), attention kernel
(left out: the one `run` counts, megatron's eager), ZeRO-3 over data ranks (as --fsdp N, up to
16) and recompute (run with transformers' model, on one process or under FSDP2); an option typed
beside it wins. What a CPU run cannot honour (tensor, pipeline, context and expert splits, FP8,
state offloaded from the GPU, GPU-only kernels, a precision mix, an optimizer PyTorch lacks) is
said on standard error, a note naming the key and what is measured instead
([W-MEASURE-INSTEAD]); a generic model (model.parameters)
is refused.
"""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {value}")
    return value


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number 0 <= p < 1, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number 0 <= p < 1, got {value:g}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "measure",
        help="train real steps in PyTorch and compare measured state with tiersim's prediction",
        description=textwrap.fill(  # the raw formatter keeps the epilog's layout, not this
            "Build the model in PyTorch (the `measure` extra), train a warm-up step and a "
            "measured step in one precision, and print the bytes of weights, gradients, optimizer "
            "state and retained activations (and the allocator peak on a GPU) beside tiersim's "
            "prediction for the same configuration. Standard error names each stage (importing "
            "PyTorch, training: minutes on a loaded CPU) with the time elapsed: in place on a "
            "terminal, else a line as each starts and finishes.",
            width=80,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _training_options(parser)
    _module_options(parser)
    _run_options(parser)
    parser.set_defaults(handler=run)


def _training_options(parser: argparse.ArgumentParser) -> None:
    """What is trained: the model, the shape of a step, the optimizer and the precision."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--model", metavar="PRESET", help="a model preset name (e.g. gpt2) or a model YAML file"
    )
    which.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    which.add_argument(
        "--scenario",
        metavar="FILE",
        help="a scenario file: its model, seq_len, micro-batch, optimizer, precision (as one "
        "--dtype), implementation, attention kernel, recompute and ZeRO-3 layout (as --fsdp); "
        "what a CPU run cannot honour said in a note; options typed here win",
    )
    parser.add_argument(
        "--seq-len",
        type=positive_int,
        metavar="TOKENS",
        help="sequence length in tokens (default: the model's max_positions, else 2048)",
    )
    parser.add_argument(
        "--micro-batch-size",
        type=positive_int,
        metavar="SEQUENCES",
        help="sequences per micro-batch (default: 1)",
    )
    parser.add_argument(
        "--optimizer",
        choices=choices.OPTIMIZERS,
        help="optimizer trained with; its state is measured "
        f"(default: {choices.OPTIMIZER_DEFAULT})",
    )
    parser.add_argument(
        "--dtype",
        choices=choices.DTYPES,
        help="precision of weights, gradients, optimizer state and activations (default: bf16)",
    )


def _module_options(parser: argparse.ArgumentParser) -> None:
    """Which modules run: tiersim's own or a transformers model, its attention and dropout."""
    parser.add_argument(
        "--implementation",
        choices=choices.IMPLEMENTATIONS,
        help="the modules trained: a transformers model built from the dimensions, random "
        "weights, nothing downloaded (compared with the huggingface accounting, like with "
        "like) or tiersim's own (compared with the megatron formula, for --calibrate and "
        "--fsdp) (default: huggingface; tiersim with --calibrate or --fsdp)",
    )
    parser.add_argument(
        "--attention",
        choices=choices.ATTENTION,
        help="sdpa: torch's scaled_dot_product_attention (flash kernels); eager (or math): "
        "explicit softmax (default: sdpa)",
    )
    parser.add_argument(
        "--dropout",
        type=probability,
        metavar="P",
        help="attention and hidden dropout probability of a transformers model (default: the "
        "model's, from its config.json, else the family's: GPT-2 0.1, Llama 0.0)",
    )


def _run_options(parser: argparse.ArgumentParser) -> None:
    """Where it trains, the overrides, and what is written."""
    parser.add_argument(
        "--device",
        choices=choices.DEVICES,
        default="auto",
        help="where to train; auto: cuda when PyTorch sees a GPU, else cpu (default: auto)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="model.KEY=VALUE",
        help="override one model dimension, e.g. --set model.layers=2 (repeatable); with "
        "--scenario, any of the scenario's keys, as `run` takes them (PATH=VALUE)",
    )
    add_format_arg(parser)
    parser.add_argument(
        "--fsdp",
        type=positive_int,
        metavar="N",
        help="run FSDP2 (fully_shard) on N CPU processes (gloo, 127.0.0.1) with tiersim's own "
        "modules and AdamW, and compare each rank's shard bytes with the prediction; with "
        "--implementation huggingface, transformers' model (--optimizer adamw, adam, muon or "
        "adamw8bit, torchao's: in bf16 stepping each rank's local shards), and compare rank 0's "
        "step peak with the memory timeline's (default: no FSDP, one process on --device)",
    )
    parser.add_argument(
        "--calibrate",
        type=file_arg,
        metavar="FILE",
        help="write a model preset YAML with the activation factor (default: none written)",
    )


def _difference(measured: int, predicted: int) -> str:
    diff = measured - predicted
    sign = "+" if diff > 0 else ""
    share = f" ({100 * diff / predicted:+.1f} %)" if predicted else ""
    return f"{sign}{fmt_bytes(diff)}{share}"


def table(m: Measurement) -> str:
    from tiersim.groundtruth.measure import CLASSES
    from tiersim.report.table import render

    s, req = m.scenario, m.request
    rows = [
        [
            cls,
            fmt_bytes(m.measured[cls]),
            fmt_bytes(m.predicted[cls]),
            _difference(m.measured[cls], m.predicted[cls]),
        ]
        for cls in CLASSES
    ]
    if m.peak_allocated_bytes is not None:
        peak, pred = m.peak_allocated_bytes, m.predicted_peak_bytes
        label = "peak (GPU)" if m.device == "cuda" else "step peak (profiler)"
        rows.append([label, fmt_bytes(peak), fmt_bytes(pred), _difference(peak, pred)])
    else:
        rows.append(["peak (GPU)", "- (no GPU)", fmt_bytes(m.predicted_peak_bytes), ""])
    where = f"{m.device} ({m.device_name})" if m.device_name else m.device
    title = (
        f"{fmt_count(m.parameters)} parameters ({m.parameters:,}), PyTorch {m.torch_version} "
        f"on {where}: seq_len {s.seq_len} tokens, micro-batch {s.training.micro_batch_size}, "
        f"{req.dtype}, {req.optimizer}, attention {req.attention}, {req.implementation}"
    )
    return render(["class", "measured", "predicted", "difference"], rows, title)


def _apart(m: Measurement) -> str:
    """What the optimizer class leaves out: per optimizer, not per parameter."""
    from tiersim.state.optimizers import optimizer

    return optimizer(m.scenario.training.optimizer).reported_apart


def hf_notes(m: Measurement) -> list[str]:
    """What ran, per layer and outside against the prediction, and what a GPU keeps otherwise."""
    from tiersim.state.activations import DEVICE_TERMS, accounting_for

    per, acc = m.activations_per_layer, accounting_for(m.scenario, m.device)
    predicted = getattr(m, "predicted_layers", ()) or (m.predicted_per_layer or 0,)
    outside, predicted_outside = m.activations_outside_layers, m.predicted_outside or 0
    rotary = "rotary tables, " if m.scenario.model.position == "rope" else ""  # not GPT-2's
    lines = [
        f"ran transformers' {m.family} model (random weights), attn_implementation "
        f"{acc.kernel}, attention dropout {acc.attention_dropout:g}, hidden dropout "
        f"{acc.hidden_dropout:g}, use_cache=False; predicted with training.implementation "
        f"huggingface for the {m.device}",
        f"activations per layer: measured {fmt_bytes(per[0])}"
        + ("" if len(set(per)) == 1 else f" to {fmt_bytes(max(per))}")
        + f", predicted {fmt_bytes(predicted[0])}"
        + ("" if len(set(predicted)) == 1 else f" to {fmt_bytes(max(predicted))}")
        + f"; outside the {len(per)} layers "
        f"(ids, {rotary}final norm, head input, fp32 log-softmax, labels): measured "
        f"{fmt_bytes(outside)}, predicted {fmt_bytes(predicted_outside)}",
        f"optimizer excludes {fmt_bytes(m.optimizer_step_counters_bytes)} of {_apart(m)}",
    ]
    if m.device == "cpu":
        lines += [f"on a GPU this differs: {term}" for term in DEVICE_TERMS]
    return lines


def notes(m: Measurement, calibrating: bool = False) -> str:
    """The table's notes; `calibrating`: a preset is written (--calibrate), which the notes
    on a shrunk model speak of."""
    from tiersim.groundtruth.measure_preset import shrink_lines

    shrunk = shrink_lines(m, calibrating)
    if m.hf:
        return "\n".join(f"  - {line}" for line in hf_notes(m) + shrunk)
    per = m.activations_per_layer
    each = (
        fmt_bytes(per[0]) if len(set(per)) == 1 else f"{fmt_bytes(min(per))}-{fmt_bytes(max(per))}"
    )
    lines = [
        f"activations: the {len(per)} transformer layer{'s' * (len(per) != 1)} only ({each} "
        "per layer); the embeddings, "
        f"final norm, logits and loss keep another {fmt_bytes(m.activations_outside_layers)}, "
        "which the megatron accounting does not count (the huggingface one does)",
        f"activations measured / tiersim's formula = {m.activation_factor():.4f} (--calibrate "
        "FILE writes it into a model preset; `tiersim measure --help` explains the terms)",
        f"optimizer excludes {fmt_bytes(m.optimizer_step_counters_bytes)} of {_apart(m)}",
        "master: one precision throughout, so no separate master copy exists or is predicted",
    ]
    lines += shrunk
    return "\n".join(f"  - {line}" for line in lines)


def _preset_inputs(args: argparse.Namespace, req: Request) -> list[Path]:
    """The files this run reads (a config.json is no .yaml path), which --calibrate must not
    replace: the model file, and the scenario file."""
    preset = req.model.get("preset")
    found = [req.base_dir / preset] if isinstance(preset, str) and is_preset_file(preset) else []
    return found + ([Path(args.scenario)] if args.scenario else [])


def _write_preset(path: Path, m: Measurement) -> None:
    from tiersim.groundtruth.measure import SOURCE
    from tiersim.groundtruth.measure_preset import calibrated_preset
    from tiersim.report.output import write_atomic

    try:
        write_atomic(path, calibrated_preset(m))
    except OSError as exc:
        expected = "a file path in a writable folder"
        raise cannot_write("--calibrate", path, exc, expected, SOURCE) from None
    print(
        f"wrote model preset {path} (activation_factor {m.activation_factor():.4f}); use it in "
        f"a scenario as model: {{preset: {path}}} (relative to the scenario file)",
        file=sys.stderr,
    )


# the scenario keys measure's options set: a problem at one names the option typed
OPTION_KEYS = {
    "training.seq_len": "--seq-len",
    "training.micro_batch_size": "--micro-batch-size",
    "attention": "--attention",
}


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except InputError as exc:
        if args.scenario:
            raise in_scenario_terms(exc, args) from None
        if not any(p.path in OPTION_KEYS for p in exc.problems):
            raise
        problems = [
            Problem(OPTION_KEYS.get(p.path, p.path), p.message, p.code) for p in exc.problems
        ]
        raise InputError(exc.source, problems) from None


def _said_if_slow(torch: Any, req: Any, source: str) -> None:
    """A note where bf16 trains on a CPU that multiplies it in PyTorch's reference kernel."""
    from tiersim.groundtruth.cpu_bf16 import bf16_over_fp32, slow_bf16_note

    if torch is None:  # no module to time: a stand-in for PyTorch's import (tests' stages)
        return
    device = "cuda" if req.device == "auto" and torch.cuda.is_available() else req.device
    if req.dtype == "bf16" and device in ("cpu", "auto"):
        note = slow_bf16_note(bf16_over_fp32(torch), req.dtype, "cpu", source)
        if note:
            end_open_lines()  # the stage's line on a terminal, ended first
            print(note, file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from tiersim.cli.counting import Stages
    from tiersim.groundtruth.measure import SOURCE, import_torch, measure, prediction_scenario
    from tiersim.groundtruth.measure_report import report
    from tiersim.report.json_report import to_json

    req, fsdp, said = scenario_request(args) if args.scenario else (request(args), args.fsdp, [])
    if args.calibrate and (fsdp is not None or req.implementation == "huggingface"):
        why = "huggingface's accounting needs no factor (set training.implementation)"
        why = "not with --fsdp" if fsdp is not None else why
        raise InputError(
            SOURCE, [Problem("--calibrate", f"{why} (expected tiersim's modules)", "E-OPTION")]
        )
    if fsdp is not None:
        return run_fsdp(req, fsdp, args.format, said)
    preset = Path(args.calibrate) if args.calibrate else None
    if preset:  # before measuring, so a mistake in it costs nothing
        usable_preset_path("--calibrate", preset, _preset_inputs(args, req), SOURCE)
    prediction_scenario(req)  # its input's mistakes said first, with no stage before them
    for line in said:  # what the scenario says that is measured otherwise, once found valid
        print(line, file=sys.stderr)
    stages = Stages("measure", log=True)  # minutes in PyTorch: said meanwhile, a log too
    try:
        stages("importing PyTorch")  # seconds; measure's own import then finds it loaded
        _said_if_slow(import_torch(), req, SOURCE)
        stages("training the model in PyTorch (a warm-up step, then the measured one)")
        m = measure(req)
        stages.finish()
    finally:
        stages.close()
    if args.format == "json":
        print(to_json(report(m)))
    else:
        print(f"{table(m)}\n\nnotes:\n{notes(m, preset is not None)}")
    if preset:
        _write_preset(preset, m)
    return 0
