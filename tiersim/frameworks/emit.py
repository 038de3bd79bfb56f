"""A scenario written back in a framework's own format (`plan --emit`, `compare --emit`):
a DeepSpeed JSON config, a Megatron-LM launch script, a torchtitan TOML.

Each writer is the inverse of its reader (deepspeed.py, megatron.py, torchtitan.py): importing
what it writes, with the same model and hardware, gives the scenario back (tests/
test_emit.py). What the framework's format cannot say (a tier it has no device for, tensor
parallelism in a DeepSpeed JSON) is returned as notes, never written as something else.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from tiersim.config.schema import Scenario
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import Kind, fmt_exact
from tiersim.frameworks.write_deepspeed import write_deepspeed
from tiersim.frameworks.write_megatron import write_megatron
from tiersim.frameworks.write_torchtitan import write_torchtitan
from tiersim.frameworks.written import Emitted

EXTENSIONS = {"deepspeed": "json", "megatron": "sh", "torchtitan": "toml"}
__all__ = ["EXTENSIONS", "Emitted", "emit", "read_back_differences"]


def emit(s: Scenario, kind: str) -> Emitted:
    """`s` in the format of `kind` (deepspeed, megatron or torchtitan), with a note for each
    execution key the written file does not give back when imported."""
    writers = {"deepspeed": write_deepspeed, "megatron": write_megatron}
    writers["torchtitan"] = write_torchtitan
    writer = writers.get(kind)
    if writer is None:  # the API's caller (the CLI's --emit takes these three only)
        why = f"{kind!r:.40}: expected one of {', '.join(writers)}"
        raise InputError("emit", [Problem("kind", why, "E-OPTION")])
    out = writer(s)
    noted = {n.path for n in out.notes}
    for path, (ours, theirs) in read_back_differences(s, kind, out.text).items():
        if path not in noted and path.rpartition(".")[0] not in noted:
            why = f"{ours}: not said by the {kind} file (importing it gives {theirs})"
            out.notes.append(Problem(path, why, "W-EMIT-APPROXIMATE"))
    return out


# the sections a framework's file describes (the model and the machine come from elsewhere)
EXECUTION = ("training", "parallel", "placement")


def _leaves(node: object, prefix: str, out: dict[str, object]) -> dict[str, object]:
    if isinstance(node, dict):
        for key, value in node.items():
            _leaves(value, f"{prefix}{key}.", out)
    else:
        out[prefix[:-1]] = node
    return out


def read_back_differences(s: Scenario, kind: str, text: str) -> dict[str, tuple[str, str]]:
    """Execution keys (training, parallel, placement) whose value `tiersim import` of `text`,
    with `s`'s model and hardware, gives otherwise: path -> (s's value, the import's), as
    given (a framework's defaults for keys left out are not filled in on either side, but for
    `parallel`'s overlap keys, which are compared as each side's framework resolves them: a
    Megatron script cannot say "Megatron-LM's default" any other way than by leaving it out,
    and the loss's chunks and the vocabulary's divisor, compared as each side resolves them).
    `training.global_batch_size` is left out: given, it derives the same accumulation."""
    import tempfile
    from pathlib import Path

    from tiersim.config.document import scenario_document
    from tiersim.core.errors import InputError
    from tiersim.frameworks.assemble import ImportOptions, import_configs
    from tiersim.frameworks.mapping import as_yaml

    doc = scenario_document(s)

    def flow(value: object) -> str:  # one line of YAML, quoted where it must be
        return yaml.safe_dump(value, default_flow_style=True, width=2**31).strip()

    sets = (f"model={flow(doc['model'])}", f"hardware={flow(doc['hardware'])}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"emitted.{EXTENSIONS[kind]}"
        path.write_text(text, encoding="utf-8")
        try:
            back = import_configs([path], ImportOptions(kind=kind, name=s.name, overrides=sets))
        except InputError as exc:
            return {"": ("this scenario", f"an error: {exc.problems[0].message}")}
    from tiersim.config.framework_parallel import resolved_parallel
    from tiersim.config.loss_chunks import DEFAULT_LOSS_CHUNKS
    from tiersim.config.vocab_padding import vocab_divisor

    def section_of(scenario: Scenario, section: str) -> dict:
        given = resolved_parallel(scenario) if section == "parallel" else getattr(scenario, section)
        out = _leaves(given.model_dump(mode="json"), f"{section}.", {})
        if section == "training":  # the loss's chunks as each implementation resolves them
            t = scenario.training
            out[f"{section}.loss_chunks"] = t.loss_chunks or DEFAULT_LOSS_CHUNKS[t.implementation]
            # and the vocabulary's divisor: unpadded is null under no framework, 1 in a script
            out[f"{section}.make_vocab_size_divisible_by"] = vocab_divisor(scenario) or 1
        return out

    out = {}
    for section in EXECUTION:  # as given (a framework's defaults not filled in)
        mine, got = section_of(s, section), section_of(back.loaded.scenario, section)
        for key, value in mine.items():
            if key != "training.global_batch_size" and got.get(key) != value:
                out[key] = (_said(key, value, as_yaml), _said(key, got.get(key), as_yaml))
    return out


def _said(key: str, value: object, as_yaml: Callable[[object], str]) -> str:
    """A value as the note says it: a quantity with its unit, as the scenario file writes it
    (`training.workspace: 1 GiB`; it said `1073741824.0`), else as YAML writes it."""
    if key in QUANTITIES and isinstance(value, int | float) and not isinstance(value, bool):
        return fmt_exact(float(value), QUANTITIES[key])
    return as_yaml(value)


# the execution keys that hold a quantity with a unit (the others: counts, choices, tiers)
QUANTITIES = {"training.workspace": Kind.SIZE}


# --- DeepSpeed ------------------------------------------------------------------------------
