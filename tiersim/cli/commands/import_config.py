"""`tiersim import`: a scenario from DeepSpeed, Megatron-LM, torchtitan or Accelerate configuration
files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiersim.cli.commands.common import (
    add_set_arg,
    cannot_write,
    file_arg,
    output_error,
    positive_int,
)
from tiersim.frameworks import IMPORT_KINDS


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "import",
        help="write a scenario from DeepSpeed, Megatron-LM, torchtitan or Accelerate configuration "
        "files",
        description="Read a framework's own configuration (a DeepSpeed JSON config, a "
        "Megatron-LM argument list or launch script, a Megatron-Bridge YAML or Python recipe, "
        "a torchtitan TOML, an Accelerate config YAML; the kind of each recognised from its "
        "content, or named with --from) and write the scenario it describes: ZeRO stage and "
        "offload devices, parallel degrees, batch sizes, "
        "precision, recompute. Every key that cannot be mapped is named in a note (standard "
        "error, and comments atop the file), with the value; keys of features this version does"
        " not model yet say so. Several files are merged, a later one's values winning (noted)."
        " The model comes from the configs (Megatron's model flags, torchtitan's name and "
        "flavor) or --hf-config; the hardware is a preset (--hardware).",
    )
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="framework config files")
    _add_sources(parser)
    parser.add_argument("--name", default=None, help="scenario name (default: the first file's)")
    parser.add_argument(
        "--out",
        type=file_arg,
        metavar="SCENARIO.yaml",
        default=None,
        help="file to write the scenario to (default: standard output)",
    )
    add_set_arg(parser, "a value of the scenario written", "50 GB/s")
    parser.set_defaults(handler=run)


def _add_sources(parser: argparse.ArgumentParser) -> None:
    """Where what the configs do not say comes from: the kind, the model, the machine."""
    parser.add_argument(
        "--from",
        dest="kind",
        choices=IMPORT_KINDS,
        default=None,
        help="read every CONFIG as this framework's (default: recognised from the content)",
    )
    parser.add_argument(
        "--hf-config",
        metavar="PATH",
        default=None,
        help="the model: a Hugging Face config.json (or a folder holding one); wins over "
        "model flags in the configs",
    )
    parser.add_argument(
        "--recipe",
        metavar="FUNCTION",
        default=None,
        help="the recipe function of a Megatron-Bridge Python recipe file, read without "
        "running it (default: the file's only *pretrain_config function)",
    )
    parser.add_argument(
        "--hardware",
        metavar="PRESET",
        default="dgx-h100",
        help="hardware preset for the scenario (default: dgx-h100; `tiersim presets` lists them)",
    )
    parser.add_argument(
        "--gpus",
        type=positive_int,
        default=None,
        metavar="N",
        help="the world size (GPUs in all): sets the data-parallel size as N / (tensor x "
        "pipeline x context) (default: a launch script's torchrun --nproc_per_node x "
        "--nnodes, or an Accelerate config's num_processes, else DeepSpeed's "
        "train_batch_size / (micro x accumulation), else 1)",
    )


def run(args: argparse.Namespace) -> int:
    from tiersim.api import imported as import_configs

    paths = [Path(p) for p in args.configs]
    imported = import_configs(
        paths,
        args.kind,
        args.hf_config,
        args.hardware,
        args.gpus,
        args.overrides,
        args.name,
        args.recipe,
    )
    for line in imported.note_lines():
        print(line, file=sys.stderr)
    text = imported.yaml_text()
    if args.out is None:
        print(text, end="")
        return 0
    out = Path(args.out)
    if out.resolve() in {p.resolve() for p in paths}:  # never write over a config read
        raise output_error("--out", out, "is one of the configs read (expected another path)")
    from tiersim.report.output import write_atomic

    try:
        write_atomic(out, text)  # never half a scenario where an earlier one was
    except OSError as exc:
        raise cannot_write("--out", out, exc, "a writable file path") from None
    print(f"wrote {out}", file=sys.stderr)
    return 0
