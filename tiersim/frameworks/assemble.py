"""Framework configs in, one scenario out: each file read and mapped (its own module), the
mappings merged, the data-parallel size and the gradient accumulation worked out, the model
and the hardware added, and the result validated as any scenario file is.

The batch rule every framework shares: global batch = micro-batch x gradient accumulation x
data-parallel size (sequences per optimizer step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tiersim.config.load import Loaded, blamed_on_overrides, build
from tiersim.config.messages import MAX_LISTED
from tiersim.config.overrides import apply_overrides, set_path
from tiersim.core.errors import InputError, Problem
from tiersim.core.records import record
from tiersim.frameworks.accelerate import read_accelerate
from tiersim.frameworks.deepspeed import drop_aliases_set, read_deepspeed
from tiersim.frameworks.detect import ConfigFile, read_config
from tiersim.frameworks.hf_auto import HIDDEN, fill_from_hidden
from tiersim.frameworks.mapping import PENDING, Mapped, as_yaml
from tiersim.frameworks.megatron import read_megatron
from tiersim.frameworks.megatron_vocab import bridge_keeps_vocab
from tiersim.frameworks.sources import origin, sourced
from tiersim.frameworks.torchtitan import read_torchtitan, replicate_x_shard
from tiersim.frameworks.unsaid import unsaid
from tiersim.frameworks.values import ValueProblem

DEFAULT_HARDWARE = "dgx-h100"
_HIDDEN_PATHS = {key: path for key, (path, *_) in HIDDEN.items()}


@record
class ImportOptions:
    kind: str | None = None  # --from: every file read as this framework's
    hf_config: str | None = None
    hardware: str = DEFAULT_HARDWARE
    gpus: int | None = None  # the world size, where the configs do not give it
    name: str | None = None
    overrides: tuple[str, ...] = ()
    recipe: str | None = None  # --recipe: a Megatron-Bridge Python recipe's function


@dataclass
class Imported:
    """The scenario mapping written, its validated scenario, and every note, each as
    (file, Problem)."""

    raw: dict[str, Any]
    loaded: Loaded
    notes: list[tuple[str, Problem]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def note_lines(self) -> list[str]:
        return [f"note: {p.render(source)}" for source, p in self.listed()]

    def listed(self) -> list[tuple[str, Problem]]:
        """The notes as said: the first MAX_LISTED settings left unmapped, then one note
        counting the rest (a DeepSpeed JSON of 20,000 unknown keys printed 20,000 notes, as
        the scenario loader once listed every unknown key); every other note kept."""
        unmapped = [n for n in self.notes if n[1].code == "W-IMPORT-UNMAPPED"]
        if len(unmapped) <= MAX_LISTED:
            return list(self.notes)
        rest = unmapped[MAX_LISTED:]
        dropped = {id(n) for n in rest}
        source, first = rest[0]
        what = (
            f"... and {len(rest):,} more settings tiersim has no key for, from {first.path} on "
            f"(the first {MAX_LISTED} are listed)"
        )
        kept = [n for n in self.notes if id(n) not in dropped]
        return [*kept, (source, Problem("", what, "W-IMPORT-UNMAPPED"))]

    def yaml_text(self) -> str:
        head = [f"# imported by `tiersim import` from {', '.join(self.sources)}"]
        if self.notes:
            head.append("# what the import could not map (also printed as notes):")
            head += [f"#   {p.render(Path(s).name)}" for s, p in self.listed()]
        body = yaml.safe_dump(self.raw, sort_keys=False, allow_unicode=True)
        return "\n".join(head) + "\n" + body


def _mapped(config: ConfigFile, hf_config: bool) -> Mapped:
    try:
        if config.kind == "deepspeed":
            return read_deepspeed(config.content, config.path)
        if config.kind == "accelerate":
            return read_accelerate(config.content, config.path)
        if config.kind == "megatron":
            mapped = read_megatron(config.content, config.path, hf_config)
            return _recipe_model(config, mapped, hf_config)
        if not isinstance(config.content, dict):
            raise ValueProblem("", "expected a TOML document of tables")
        return read_torchtitan(config.content, config.path, hf_config)
    except ValueProblem as exc:
        raise InputError(config.path, [Problem(exc.key, exc.why, "E-IMPORT-VALUE")]) from None


def _recipe_model(config: ConfigFile, mapped: Mapped, hf_config: bool) -> Mapped:
    """A Megatron-Bridge recipe's model (AutoBridge.from_hf_pretrained) as the tiersim preset
    of that name, and what reading the recipe left out."""
    mapped.notes.extend(config.notes)
    if config.hf_model is not None:
        bridge_keeps_vocab(mapped, f"cfg.model ({config.hf_model})")
    if config.hf_model is None or hf_config:
        return mapped
    from tiersim.config.presets import preset_names
    from tiersim.frameworks.bridge import preset_for

    key = f"cfg.model ({config.hf_model})"
    preset = preset_for(config.hf_model, set(preset_names("models")))
    if preset is None:
        why = "no tiersim model preset of that name (give --hf-config with its config.json)"
        mapped.note(key, why)
    else:
        mapped.put("model.preset", preset, key)
    return mapped


# the facts a later file may restate, as a note names them (micro-batch and accumulation:
# their scenario keys' own notes say it)
_FACTS = {"world": "world size", "global": "global batch", "data": "data-parallel size"}


def _merged(mappings: list[Mapped]) -> tuple[dict[str, Any], dict[str, str], dict[str, Any], list]:
    """Scenario values (a later file's wins, with a note), their sources, and facts."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    facts: dict[str, Any] = {}
    notes: list[tuple[str, Problem]] = []
    for m in mappings:
        notes += [(m.source, p) for p in m.notes]
        for path, value in m.values.items():
            if path in values and values[path] != value and path != "training.framework":
                why = f"{as_yaml(value)} replaces {as_yaml(values[path])} from {sources[path]}"
                notes.append(
                    (m.source, Problem(m.sources[path], f"{path}: {why}", "W-IMPORT-REPLACED"))
                )
            values[path] = value
            sources[path] = f"{m.source}: {m.sources[path]}"
        for path, key in m.sources.items():  # a part of a value built from several keys
            if path not in m.values:
                sources[path] = f"{m.source}: {key}"
        for key, value in m.facts.items():
            if key in facts and facts[key] != value and key in _FACTS:
                why = f"{value} replaces {facts[key]} from an earlier file"
                notes.append((m.source, Problem(f"({_FACTS[key]})", why, "W-IMPORT-REPLACED")))
            facts[key] = value
    return values, sources, facts, notes


def _world(facts: dict[str, Any], options: ImportOptions, notes: list) -> int | None:
    """GPUs in all: --gpus, else the launcher's in a script (--gpus wins, noted)."""
    world = facts.get("world")
    if options.gpus is not None and world is not None and world != options.gpus:
        said = facts.get("world_said", "the script's world size {} (torchrun's flags)")
        why = f"{options.gpus} replaces {said.format(world)}"
        notes.append(("--gpus", Problem("", why, "W-IMPORT-REPLACED")))
    return options.gpus if options.gpus is not None else world


def _data_parallel(facts: dict[str, Any], options: ImportOptions, notes: list) -> int:
    """The data-parallel size: the world over tensor x pipeline x context (torchtitan:
    replicate x shard, shard -1 the rest), else DeepSpeed's batch rule, else 1 (noted)."""
    model_parallel = facts.get("model_parallel", 1)
    world = _world(facts, options, notes)
    ranks = None
    if world is not None:
        if world % model_parallel:
            given = (
                "given by --gpus"
                if options.gpus
                else facts.get(
                    "world_by",
                    "the world size its torchrun flags give (--nproc_per_node x --nnodes)",
                )
            )
            why = (
                f"{world} GPUs, {given}, are not a multiple of tensor x pipeline x context = "
                f"{model_parallel} (expected --gpus N with N a multiple of {model_parallel}, "
                f"e.g. --gpus {model_parallel})"
            )
            raise InputError(
                "--gpus" if options.gpus else facts.get("world_from", "(world size)"),
                [Problem("", why, "E-IMPORT-CONFLICT")],
            )
        ranks = world // model_parallel
    if "shard" in facts:  # torchtitan
        data = replicate_x_shard(facts, ranks, world, notes)
    elif ranks is not None:
        data = ranks
    elif "data" in facts:
        return facts["data"]
    else:
        why = "not given and no world size in the configs: data-parallel size 1 (give --gpus N)"
        notes.append(("--gpus", Problem("", why, "W-IMPORT-ASSUMED")))
        return 1
    if facts.get("data", data) != data:
        why = (
            f"{world} GPUs give {data} data-parallel ranks; train_batch_size / (micro x "
            f"accumulation) gives {facts['data']} (expected one world size)"
        )
        raise InputError("--gpus", [Problem("", why, "E-IMPORT-CONFLICT")])
    return data


def _batch(values: dict[str, Any], facts: dict[str, Any], data: int) -> None:
    """micro-batch and gradient accumulation from the global batch where one is given:
    global = micro x accumulation x data, each checked to divide."""
    total = facts.get("global")
    micro, accumulation = facts.get("micro"), facts.get("accumulation")
    if total is None:
        return
    where = facts.get("global_from", ("(configs)", "global batch"))
    if micro is None and accumulation is not None:  # DeepSpeed derives the micro-batch
        if total % (accumulation * data):
            why = (
                f"{total} sequences are not gradient accumulation {accumulation} x "
                f"data-parallel {data} x a whole micro-batch "
                f"(expected a multiple of {accumulation * data})"
            )
            raise InputError(where[0], [Problem(where[1], why, "E-IMPORT-CONFLICT")])
        micro = total // (accumulation * data)
    micro = micro or values.get("training.micro_batch_size", 1)
    per_step = micro * data
    if total % per_step:
        why = (
            f"{total} sequences are not micro-batch {micro} x data-parallel {data} x a whole "
            f"gradient accumulation (expected a multiple of {per_step}; data-parallel sizes "
            f"that divide it at micro-batch {micro}: {_data_sizes(total, micro)})"
        )
        raise InputError(where[0], [Problem(where[1], why, "E-IMPORT-CONFLICT")])
    values["training.micro_batch_size"] = micro
    # checked above, and left for the scenario to derive from the global batch (as `run`'s
    # scenario.yaml leaves it), so that a --set of the micro-batch or the data-parallel size
    # keeps the global batch rather than meeting a stale accumulation as a conflict
    values.pop("training.grad_accumulation", None)


def _data_sizes(total: int, micro: int) -> str:
    """The data-parallel sizes d with micro x d dividing the global batch, the first dozen; where
    the micro-batch itself does not divide it, none can (said so, not left blank)."""
    fits = [d for d in range(1, min(total, 4096) + 1) if total % (micro * d) == 0]
    if not fits:
        return f"none, as {total} is not a multiple of the micro-batch {micro}"
    return ", ".join(map(str, fits[:12])) + (", ..." if len(fits) > 12 else "")


def _name(options: ImportOptions, paths: list[Path]) -> str:
    if options.name:
        return options.name
    stem = re.sub(r"[^A-Za-z0-9_.\-]+", "-", paths[0].stem).strip(".-") or "imported"
    return stem[:200]


def import_configs(paths: list[Path], options: ImportOptions) -> Imported:
    """The scenario the framework configs at `paths` describe (InputError, exit 2, for a file
    that cannot be read or a value that cannot be mapped)."""
    hf = options.hf_config is not None
    configs = [read_config(p, options.kind, options.recipe) for p in paths]
    mappings = [_mapped(c, hf) for c in configs]
    values, sources, facts, notes = _merged(mappings)
    data = _data_parallel(facts, options, notes)
    values["parallel.data"] = data
    if facts.get("shard", 1) > 1:  # FSDP shards over its shard group (HSDP: per replica)
        values["parallel.zero_stage"] = 3
        sources["parallel.zero_stage"] = "(data_parallel_shard_degree > 1: FSDP)"
        if facts.get("replicate", 1) > 1:
            hsdp = Mapped("torchtitan", mappings[-1].source)
            hsdp.put(
                "parallel.shard_group", facts["shard"], "parallelism.data_parallel_shard_degree"
            )
            values.update(hsdp.values)
            notes += [(hsdp.source, p) for p in hsdp.notes]
    _batch(values, facts, data)
    raw: dict[str, Any] = {"name": _name(options, paths)}
    if hf:
        raw["model"] = {"hf_config": str(Path(options.hf_config).resolve())}
        values = {k: v for k, v in values.items() if not k.startswith("model.")}
    for path, value in values.items():
        set_path(raw, path.split("."), value)
    raw.setdefault("hardware", {"preset": options.hardware})
    drop_aliases_set(raw, list(options.overrides))  # a --set of either spelling wins
    for override in options.overrides:  # its value is the user's, not a config's
        typed = override.partition("=")[0].strip()
        for path in [p for p in sources if p == typed or p.startswith(f"{typed}.")]:
            del sources[path]
        sources[typed] = ""  # not its mapped parent's either (`_source_of`)
    raw = apply_overrides(raw, list(options.overrides), "tiersim import")
    unsaid(raw, facts, notes)
    if not isinstance(raw.get("model"), dict) or not raw["model"]:
        why = (
            "no model in the configs (expected --hf-config PATH to a config.json, or --set "
            "model.preset=NAME; `tiersim presets` lists them)"
        )
        raise InputError(", ".join(map(str, paths)), [Problem("model", why, "E-IMPORT-MISSING")])
    try:
        loaded = _validated(raw, sources, paths, notes, mappings[-1].source)
        loaded = _hidden_auto(raw, facts, loaded, sources, paths, notes, mappings[-1].source)
    except InputError as exc:  # a key a --set gave says so, as `run`'s problems do
        named = _named_by_flags(exc, _flag_made(raw, options))
        blamed = blamed_on_overrides(named.problems, options.overrides)
        raise InputError(named.source, blamed) from None
    return Imported(raw, loaded, notes, [str(p) for p in paths])


def _hidden_auto(raw, facts, loaded: Loaded, sources, paths, notes, source: str) -> Loaded:
    """DeepSpeed keys left "auto" for the HF Trainer to fill from the model's hidden size
    (frameworks/hf_auto.py), filled from the model now known, and validated again."""
    keys = facts.get("hidden_auto")
    if not keys:
        return loaded
    filled = fill_from_hidden(raw, keys, loaded.scenario.model.hidden)
    for file, key, why in filled:
        notes.append((file, Problem(key, why, "W-IMPORT-ASSUMED")))
        sources[_HIDDEN_PATHS[key]] = f"{file}: {key}"
    return _validated(raw, sources, paths, notes, source) if filled else loaded


def _flag_made(raw: dict[str, Any], options: ImportOptions) -> dict[str, str]:
    """The scenario keys whose values the user typed as a flag of `tiersim import` (and no
    --set replaced), each with its flag."""
    hf = options.hf_config
    given = {
        "model.hf_config": ("--hf-config", str(Path(hf).resolve()) if hf is not None else None),
        "hardware.preset": ("--hardware", options.hardware),
        "name": ("--name", options.name),
    }
    made = {}
    for path, (flag, value) in given.items():
        section, _, key = path.rpartition(".")
        held = raw.get(section) if section else raw
        if value is not None and isinstance(held, dict) and held.get(key) == value:
            made[path] = flag
    return made


def _named_by_flags(exc: InputError, flags: dict[str, str]) -> InputError:
    """`exc` with a problem at a key a flag set named by the flag the user typed
    (`--hf-config: cannot read ...`, not `model.hf_config`: no file they gave has that key);
    from `tiersim import` where every problem is a flag's."""
    problems = [Problem(flags.get(p.path, p.path), p.message, p.code) for p in exc.problems]
    if all(p.path in flags for p in exc.problems):
        return InputError("tiersim import", problems)
    return InputError(exc.source, problems)


def _validated(
    raw: dict[str, Any], sources: dict[str, str], paths: list[Path], notes: list, source: str
) -> Loaded:
    """`raw` built as a scenario; a problem at a mapped key says which config key it is. A
    third-round key (PENDING) the schema takes but this version models only for other
    scenarios (training.compile for a layer whose kernels are not counted) is left out with
    a note, as a key it does not take at all is."""
    try:
        return build(raw, Path.cwd(), "imported scenario")
    except InputError as exc:
        pending = [p for p in exc.problems if p.path in PENDING and sources.get(p.path)]
        if pending:  # noted and left out even beside other problems, which are then raised
            for p in pending:
                why = f"not modelled for this scenario by this version: {p.path}: {p.message}"
                file, key = origin(sources.pop(p.path), paths, source)
                notes.append((file, Problem(key, why, "W-IMPORT-UNMAPPED")))
                _unset(raw, p.path.split("."))
            return _validated(raw, sources, paths, notes, source)
        raise sourced(exc, sources, paths, source) from None


def _unset(raw: dict[str, Any], keys: list[str]) -> None:
    """Drop the value at a key path of `raw` (and a section it leaves empty)."""
    *folders, last = keys
    parents = [raw]
    for key in folders:
        parents.append(parents[-1][key])
    del parents[-1][last]
    for folder, parent in zip(reversed(folders), reversed(parents[:-1]), strict=True):
        if parent[folder]:
            break
        del parent[folder]
