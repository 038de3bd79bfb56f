"""What `tiersim measure` is asked, from its options (`request`) or from a scenario file
(`scenario_request`: the scenario loaded with --set as `run` loads it, its settings as
measure's by groundtruth/measure_scenario.py, which says what is taken and what is noted; the
options typed beside it win). A problem measure finds in a setting the scenario gave is said at
the scenario's key, in its file (`in_scenario_terms`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.core.errors import InputError, Problem

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.groundtruth.measure import Request

# measure's options a scenario also gives (args' attribute names: Request's fields, and fsdp)
TYPED = ("seq_len", "micro_batch_size", "optimizer", "dtype", "implementation", "attention")
OPTION = {
    "seq_len": "--seq-len",
    "micro_batch_size": "--micro-batch-size",
    "optimizer": "--optimizer",
    "dtype": "--dtype",
    "implementation": "--implementation",
    "attention": "--attention",
    "fsdp": "--fsdp",
}


def typed(args: argparse.Namespace) -> dict[str, object]:
    """The options given on the command line (None: not typed)."""
    got = {name: getattr(args, name) for name in (*TYPED, "fsdp")}
    return {k: v for k, v in got.items() if v is not None}


def implementation(args: argparse.Namespace) -> str:
    """The modules measured: as typed, else what the other options need (--calibrate's factor
    and --fsdp's shards are tiersim's own modules), else transformers' model, which the
    huggingface accounting predicts like with like."""
    if args.implementation:
        return args.implementation
    return "tiersim" if args.calibrate or args.fsdp is not None else "huggingface"


def request(args: argparse.Namespace) -> Request:
    from tiersim.groundtruth.measure import SOURCE, Request

    bad = [o for o in args.overrides if not o.strip().startswith("model.")]
    if bad:
        raise InputError(
            SOURCE,
            [
                Problem(
                    "--set",
                    f"{o!r}: only model dimensions can be overridden here (expected "
                    "model.KEY=VALUE; the training shape is --seq-len, --micro-batch-size, "
                    "--optimizer, --dtype, ...; with --scenario FILE, --set takes any key)",
                    "E-SET",
                )
                for o in bad
            ],
        )
    model = {"preset": args.model} if args.model else {"hf_config": args.hf_config}
    given = {k: v for k, v in typed(args).items() if k != "fsdp"}  # the rest: Request's defaults
    return Request(
        model=model,
        device=args.device,
        dropout=args.dropout,
        overrides=tuple(args.overrides),
        base_dir=Path.cwd(),
        **given | {"implementation": implementation(args)},
    )


def scenario_request(args: argparse.Namespace) -> tuple[Request, int | None, list[str]]:
    """The request for `args.scenario`, the FSDP2 ranks it runs on (None: one process) and
    the notes (one line each) on what is measured otherwise than the scenario says."""
    from tiersim.api import SET_FLAGS
    from tiersim.api import load as load_scenario
    from tiersim.cli.commands.common import load
    from tiersim.config.overrides import parse_override
    from tiersim.groundtruth.measure import Request
    from tiersim.groundtruth.measure_scenario import measure_settings

    loaded = load(args)  # every --set, as `run` applies them
    settings = measure_settings(loaded.scenario, loaded.source, typed(args))
    # the model as the file names it, its --set kept apart: measure says what they shrank
    sets = [o for o in args.overrides if parse_override(o)[0][0] == "model"]
    named = loaded
    if sets:
        others = [o for o in args.overrides if o not in sets]
        named = load_scenario(args.scenario, others, SET_FLAGS)
    req = Request(
        model=dict(named.resolved["model"]),
        overrides=tuple(sets),
        base_dir=Path(args.scenario).parent,
        device=args.device,
        dropout=args.dropout,
        **settings.fields,
    )
    return req, settings.fsdp, [f"note: {n.render(loaded.source)}" for n in settings.notes]


def in_scenario_terms(exc: InputError, args: argparse.Namespace) -> InputError:
    """`exc` (measure's, at its settings' names) at the option where one typed gave the
    setting, else at the scenario's key, in the scenario's file where every problem is one."""
    from tiersim.groundtruth.measure import SOURCE
    from tiersim.groundtruth.measure_scenario import KEY_OF

    if exc.source != SOURCE:
        return exc
    field_of = {key: field for field, key in KEY_OF.items()} | {"--fsdp": "fsdp"}
    given, problems, in_file = typed(args), [], True
    for p in exc.problems:
        field = field_of.get(p.path, p.path)
        key = KEY_OF.get(field) or (p.path if p.path.startswith("model.") else None)
        if field in given and field in OPTION:
            key = None
            p = p.reworded(p.message, OPTION[field])
        in_file = in_file and key is not None
        problems.append(p if key is None else p.reworded(p.message, key))
    return InputError(args.scenario if in_file else SOURCE, problems)
