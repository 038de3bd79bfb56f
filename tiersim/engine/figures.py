"""The figure map: each result figure's rule, declared once beside its field in
`tiersim.engine.results` (`field(metadata=figure(...))`), and read by every place that
rebuilds a result: the steady-state extrapolation (`tiersim.engine.steady`), the checkpoint's
share of each step (`tiersim.analysis.checkpoint_interval`), the JSON report and compare.

A new figure is one line where it is measured (`tiersim.engine.metrics`) and one where its
rule is (its field): extrapolated, amortised, reported and compared by the rule.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterator
from typing import Any

from tiersim.core.frozen import replaced
from tiersim.core.records import record


class Rule(enum.Enum):
    """How a figure behaves as the step gets longer by a period (steady.py's module
    docstring) and when a checkpoint's share is added to the step."""

    # every period adds the same amount (bytes exactly); a checkpoint adds its share of the
    # interval (checkpoint_interval.with_checkpoint)
    PER_PERIOD = "added per period"
    # an average over a span (`over`): the figure times the span is added per period
    MEAN = "a mean over the step"
    # a PER_PERIOD sibling (`of`) over the step's time (with a checkpoint: over the step
    # with its share of the stall, StepResult.period_s): recomputed from it, never grown
    SHARE = "a share of the step"
    # the same at every micro-batch count; a checkpoint raises it to what its run reached
    PEAK = "a peak"
    # the same at every micro-batch count, checked: a sample that differs breaks repetition
    CONSTANT = "a constant"
    # what the run was asked or told, or set after it: the longest sample's, unchecked
    GIVEN = "given"
    # what simulating cost (events, wall time): summed over the engine runs made
    COST = "the simulation's cost"
    # per-name records (links, tiers) whose own fields carry their rules
    EACH = "per name"


@record
class Into:
    """Where a checkpoint's figure (per name: a tier, a link) goes in the step's record of
    that name: `field` combined by its own rule (PER_PERIOD: its share of the interval
    added; PEAK: the higher kept), the share also set as `shown` where given."""

    section: str  # "tiers" | "links": StepResult's mapping of records
    field: str
    shown: str | None = None


def figure(
    rule: Rule,
    *,
    json: str | None = None,
    compared: bool = False,
    of: str | None = None,
    over: str = "time_s",
    kind: str | None = None,
    total_of: str | None = None,
    into: Into | None = None,
    floor: float | None = None,
) -> dict[str, Any]:
    """A field's metadata: its rule, and where it is shown.
    `json`: its key in its record's JSON section (None: not reported there, or reported by
    the section from other figures); `compared`: `tiersim compare` compares it;
    `of`/`over`: a SHARE's numerator, a MEAN's span (a figure of the step or one the run
    measures beside it, steady.grow's `spans`); `kind`: how the repetition test judges it
    ("n": exactly, "s": seconds, "bs": byte-seconds; default by its type); `total_of`: the
    sum of that mapping of the same record; `into`: a checkpoint's figure's place in the
    step; `floor`: the least an extrapolated value may be."""
    return {
        "figure": Figure(rule, json, compared, of, over, kind, total_of, into, floor),
    }


@record
class Figure:
    rule: Rule
    json: str | None = None
    compared: bool = False
    of: str | None = None
    over: str = "time_s"
    kind: str | None = None
    total_of: str | None = None
    into: Into | None = None
    floor: float | None = None


def rule_of(field: dataclasses.Field) -> Figure | None:
    return field.metadata.get("figure")


@functools.cache
def _declared(record_type: type) -> tuple[tuple[str, Figure | None, str], ...]:
    """Each field of a result record class: its name, figure (None where it declares none)
    and type, in declaration order. Worked out once a class: `dataclasses.fields` on every
    walk was most of an extrapolation's arithmetic on the figures (1T Table 5: 0.5 of 0.7 ms)."""
    return tuple((f.name, rule_of(f), str(f.type)) for f in dataclasses.fields(record_type))


def figures(record: Any) -> Iterator[tuple[str, Figure]]:
    """Each field of a result record (a class or an instance, subclasses' fields too) with its
    figure, in declaration order; a field without one is an error (tests/test_figures.py)."""
    what = record if isinstance(record, type) else type(record)
    for name, fig, _ in _declared(what):
        if fig is None:
            raise TypeError(f"{what.__name__}.{name} declares no rule (figures.figure)")
        yield name, fig


def with_rule(record: Any, *rules: Rule) -> tuple[tuple[str, Figure], ...]:
    """Each field of the record (a class or an instance) with its figure, of those whose
    rule is one of `rules`, in declaration order."""
    return _with_rule(record if isinstance(record, type) else type(record), rules)


@functools.cache
def _with_rule(record_type: type, rules: tuple[Rule, ...]) -> tuple[tuple[str, Figure], ...]:
    """`with_rule`, worked out once a class and rules: `rebuilt` asks it of every record of
    every extrapolated result."""
    return tuple((name, fig) for name, fig in figures(record_type) if fig.rule in rules)


def exact(record: Any, name: str) -> bool:
    """A count (bytes, events): an integer, or a mapping of them, extrapolated exactly."""
    return name in _exact(record if isinstance(record, type) else type(record))


@functools.cache
def _exact(record_type: type) -> frozenset[str]:
    """The class's count fields (`exact`), worked out once."""
    counts = ("int", "dict[str, int]", "dict[str, dict[str, int]]")
    return frozenset(name for name, _, ftype in _declared(record_type) if ftype in counts)


@functools.cache
def _walked(record_type: type) -> tuple[tuple[str, Figure, str], ...]:
    """`figures` of a record class with each one's `kind`, worked out once a class: the
    extrapolation's walks below ask for them every run (a field without a figure is the
    same error as `figures` raises)."""
    return tuple((name, fig, kind(record_type, name, fig)) for name, fig in figures(record_type))


def kind(record: Any, name: str, fig: Figure) -> str:
    """How the repetition test judges the figure: "n" exactly, else "s" or fig.kind."""
    if fig.kind is not None:
        return fig.kind
    return "n" if exact(record, name) else "s"


def report_figures(record: Any) -> dict[str, Any]:
    """The record's figures under their JSON keys, in declaration order."""
    return {fig.json: getattr(record, name) for name, fig in figures(record) if fig.json}


def laid_out(layout: tuple[str, ...], values: dict[str, Any]) -> dict[str, Any]:
    """`values` in the layout's order; what the layout does not place (a figure new to the
    map) after it, in its own order."""
    out = {key: values[key] for key in layout if key in values}
    out.update((key, value) for key, value in values.items() if key not in out)
    return out


def compared_paths(section: str, record_type: type) -> tuple[str, ...]:
    """`tiersim compare`'s patterns for a section's compared figures: the step's
    (`step.overlap`), each link's or tier's (`links.*.busy_s`); a mapping's entries as
    `links.*.bytes_by_direction.*`."""
    out = []
    each = "" if section == "step" else ".*"
    for name, fig in figures(record_type):
        if fig.compared and fig.json:
            ftype = next(f.type for f in dataclasses.fields(record_type) if f.name == name)
            tail = ".*" if str(ftype).startswith("dict") else ""
            out.append(f"{section}{each}.{fig.json}{tail}")
    return tuple(out)


# --- generic walks over a record's figures (tiersim.engine.steady) ---------------------------

Key = tuple  # (kind, *path): ("s", "time_s"), ("n", "links", "pcie", "bytes_by_direction", d)


def additive(record: Any, spans: dict[str, float], path: tuple = ()) -> dict[Key, float]:
    """Every figure of `record` that grows by the same amount each period, flat by key: the
    PER_PERIOD ones as they are (a mapping's entries each), a MEAN one times its span
    (`spans`: the step's time and what the run measured beside it), the EACH records'
    likewise."""
    out: dict[Key, float] = {}
    for name, fig, k in _walked(type(record)):
        value, key = getattr(record, name), (*path, name)
        if fig.rule is Rule.EACH:
            for each, sub in value.items():
                out.update(additive(sub, spans, (*key, each)))
        elif fig.rule is Rule.PER_PERIOD:
            if isinstance(value, dict):
                out.update(((k, *key, d), v) for d, v in value.items())
            else:
                out[(k, *key)] = value
        elif fig.rule is Rule.MEAN:
            out[(k, *key)] = (value or 0.0) * spans[fig.over]
    return out


def rebuilt(record: Any, values: dict[Key, float], spans: dict[str, float], path: tuple = ()):
    """`record` with its additive figures from `values` (keyed as `additive` keys them), its
    MEAN figures their integral over the new span (as they were where that is 0), its SHARE
    figures recomputed over the new step time; the rest as they were."""
    changes: dict[str, Any] = {}
    for name, fig, k in _walked(type(record)):
        value, key = getattr(record, name), (*path, name)
        if fig.rule is Rule.EACH:
            changes[name] = {e: rebuilt(r, values, spans, (*key, e)) for e, r in value.items()}
        elif fig.rule is Rule.PER_PERIOD and isinstance(value, dict):
            changes[name] = {d: _typed(k, values[(k, *key, d)]) for d in value}
        elif fig.rule is Rule.PER_PERIOD:
            v = _typed(k, values[(k, *key)])
            changes[name] = v if fig.floor is None else max(fig.floor, v)
        elif fig.rule is Rule.MEAN:
            span = spans[fig.over]
            changes[name] = values[(k, *key)] / span if span > 0 else value
    t = spans["time_s"]
    for name, fig in with_rule(record, Rule.SHARE):
        changes[name] = changes[fig.of] / t if t > 0 else 0.0
    return replaced(record, **changes)


def _typed(kind: str, value: float) -> float:
    return int(value) if kind == "n" else value


def held(record: Any, path: tuple = ()) -> dict[tuple, Any]:
    """The figures that must not change with the micro-batch count (CONSTANT, PEAK), flat by
    path, the EACH records' likewise."""
    out: dict[tuple, Any] = {}
    for name, fig, _ in _walked(type(record)):
        value, key = getattr(record, name), (*path, name)
        if fig.rule is Rule.EACH:
            for each, sub in value.items():
                out.update(held(sub, (*key, each)))
        elif fig.rule in (Rule.CONSTANT, Rule.PEAK):
            out[key] = value
    return out


def named(path: tuple) -> str:
    """A figure's path in words: `time_s`, `busy_s of pcie`, `checkpoint stall_s`,
    `bytes_by_direction of pcie gpu->dram`."""
    prefix = "checkpoint " if path[0] == "checkpoint" else ""
    path = path[1:] if prefix else path
    if len(path) < 3:  # a figure of the record itself (a span beside it: link_time)
        return prefix + " of ".join(str(p) for p in path)
    _, name, field, *sub = path
    return f"{prefix}{field} of {' '.join(str(p) for p in (name, *sub))}"
