"""What one framework config says, as scenario keys, and the notes for all it cannot say.

Every key of the framework's file ends up in exactly one place: a scenario key (`put`), or a
note (`unmapped`, `pending`). Keys named by DESIGN.md's third round that this version's schema
may not have yet are in PENDING: a value mapped onto one is set when the schema accepts it and
otherwise reported as "not yet modelled by this version", so a schema that gains the key uses
the mapping at once (one table entry each).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem, shown

# scenario keys (DESIGN.md "Third round") a framework's config maps onto, which this
# version's schema may not accept yet: set where it does, else a note with the value
PENDING = frozenset(
    {
        "parallel.context",
        "parallel.context_comm",
        "parallel.stage_layers",
        "parallel.expert_tensor",
        "parallel.shard_group",
        "parallel.reshard_after_forward",
        "training.compile",
        "training.implementation",  # torchtitan
        "training.recompute",  # selective_op
        "training.recompute_modules",
        "training.fp8",
        "training.global_batch_size",
    }
)


@functools.cache
def _field(path: str) -> Any:
    """The schema's field at a dotted scenario key path, or None where it has none."""
    model: Any = Scenario
    info = None
    for key in path.split("."):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        info = model.model_fields.get(key)
        if info is None:
            return None
        model = info.annotation
    return info


@functools.cache
def _adapter(path: str) -> TypeAdapter | None:
    info = _field(path)
    if info is None:
        return None
    if not info.metadata:
        return TypeAdapter(info.annotation)
    return TypeAdapter(Annotated[info.annotation, *info.metadata])


def accepts(path: str, value: Any) -> bool:
    """Whether this version's schema has `path` and takes `value` there."""
    adapter = _adapter(path)
    if adapter is None:
        return False
    try:
        adapter.validate_python(value)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


def as_yaml(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list | tuple):
        return "[" + ", ".join(as_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {as_yaml(v)}" for k, v in value.items()) + "}"
    return shown(value) if isinstance(value, str) and not value.isprintable() else f"{value}"


@dataclass
class Mapped:
    """One framework file's contribution: `values` (scenario key path -> value, in the order
    set), `sources` (scenario key path -> the framework key it came from) and `notes`."""

    kind: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[Problem] = field(default_factory=list)
    # facts the assembly needs beside the scenario keys (world size, a model preset's name)
    facts: dict[str, Any] = field(default_factory=dict)

    def put(self, path: str, value: Any, key: str, parts: dict[str, str] | None = None) -> None:
        """`path` := `value`, read from the framework's `key`; a third-round key this version
        does not take is a note instead. `parts`: the framework's own key of a value inside
        `value` (a mapping built from several keys), by its scenario path under `path`, so
        that a problem there names the key it came from."""
        if path in PENDING and not accepts(path, value):
            why = f"not yet modelled by this version: {path}: {as_yaml(value)} (left out)"
            self.notes.append(Problem(key, why, "W-IMPORT-UNMAPPED"))
            return
        self.values[path] = value
        self.sources[path] = key
        self.sources.update(parts or {})

    def unmapped(self, key: str, value: Any, why: str = "") -> None:
        """A key with no scenario counterpart: named with its value, and why where known."""
        said = f"{as_yaml(value)}: " if value is not MISSING_VALUE else ""
        reason = why or "not mapped (tiersim has no setting for it)"
        self.notes.append(Problem(key, f"{said}{reason}", "W-IMPORT-UNMAPPED"))

    def note(self, key: str, why: str) -> None:
        """How a setting was read (a default taken, a value padded or read from another
        source): mapped, with what was assumed said; `unmapped` is for what is left out."""
        self.notes.append(Problem(key, why, "W-IMPORT-ASSUMED"))


MISSING_VALUE = object()
