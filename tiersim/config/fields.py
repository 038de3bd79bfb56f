"""The scenario format's field types: quantities read from unit strings once (held as floats in
base units), counts, fractions, and the strict frozen base model every section derives from.
A rejected value is shown back in the unit the user wrote it in."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from tiersim.core.errors import CodedError
from tiersim.core.units import UNLIMITED, Kind, parse

PRECISION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


# A quantity's bound: the rule as a message says it, and the test its value must pass
Bound = tuple[str, Callable[[float], bool]]
POSITIVE: Bound = ("must be > 0", lambda v: v > 0)
NON_NEGATIVE: Bound = ("must be >= 0", lambda v: v >= 0)


def _at_least_one(kind: Kind) -> Bound:
    """Bandwidths and rates below one unit per second are typos, and make times overflow."""
    return (f"must be at least 1 {kind.base_unit}", lambda v: v >= 1)


def _written(value: object) -> str:
    """A rejected value as the user wrote it ('-1 GiB', '0 years'), not converted: what the
    message is about is what they typed."""
    text = value.strip() if isinstance(value, str) else f"{value}"
    return text if len(text) <= 60 else f"{text[:57]}..."


def _unit(kind: Kind, bound: Bound, allow_unlimited: bool = False, example: str | None = None):
    """Read a quantity and hold it to `bound`, checked here, where the text is still the
    user's. `example`: the value a message suggests, where the kind's own would be odd (a
    failure interval of '15 us')."""

    def convert(value: object) -> float:
        if allow_unlimited and isinstance(value, str) and value.strip() in UNLIMITED:
            return math.inf
        number = parse(value, kind, example)
        rule, holds = bound
        if not holds(number):
            raise ValueError(f"{rule} (got {_written(value)})")
        return number

    convert.kind = kind  # type: ignore[attr-defined]  # what unit_kind() reads
    return BeforeValidator(convert)


def unit_kind(annotation: Any, metadata: list[Any] = ()) -> Kind | None:
    """The unit kind a field parses with: from its `_unit` validator, on the field or inside
    an Optional / Union of annotated types."""
    if get_origin(annotation) is Annotated:
        metadata = [*metadata, *get_args(annotation)[1:]]
    for item in metadata:
        if isinstance(item, BeforeValidator) and hasattr(item.func, "kind"):
            return item.func.kind
    for arg in get_args(annotation) if annotation is not None else ():
        if get_origin(arg) is Annotated:
            found = unit_kind(None, list(get_args(arg)[1:]))
            if found is not None:
                return found
    return None


Size = Annotated[float, _unit(Kind.SIZE, POSITIVE)]
SizeOrZero = Annotated[float, _unit(Kind.SIZE, NON_NEGATIVE)]
Bandwidth = Annotated[
    float,
    Field(allow_inf_nan=True),  # `unlimited`
    _unit(Kind.BANDWIDTH, _at_least_one(Kind.BANDWIDTH), True),
]
# hours to years: a failure interval, a budget's lifetime, a warranty
# (a second at least: a budget's lifetime of 1e-300 s made its allowed bytes a day infinite)
DURATION: Bound = ("must be > 0, and at least 1 s", lambda v: v >= 1)
Duration = Annotated[float, _unit(Kind.TIME, DURATION, example="3 h")]
# an access or link latency: nanoseconds to milliseconds; one of years left the step's
# time-weighted figures NaN (a 1e300 s latency: the step's time swamps every other)
MAX_LATENCY_S = 3600.0
LATENCY: Bound = ("must be from 0 to 1 h", lambda v: 0 <= v <= MAX_LATENCY_S)
Latency = Annotated[float, _unit(Kind.TIME, LATENCY)]
# a wait that may last hours (a job's restart after a failure)
Wait = Annotated[float, _unit(Kind.TIME, NON_NEGATIVE)]
FlopRate = Annotated[float, _unit(Kind.FLOP_RATE, _at_least_one(Kind.FLOP_RATE))]
ParamRate = Annotated[float, _unit(Kind.PARAM_RATE, _at_least_one(Kind.PARAM_RATE))]
COUNT_BOUND = 2**40  # far above any real count (docs/commands.md: Limits on input)
PositiveInt = Annotated[int, Field(gt=0, le=COUNT_BOUND, strict=True)]
NonNegativeInt = Annotated[int, Field(ge=0, le=COUNT_BOUND, strict=True)]


def _integral(value: object) -> object:
    """Accept 7.5e9 or '7.5e9' for a count (YAML reads the latter as a string)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, BeforeValidator(_integral), Field(gt=0, le=10**16, strict=True)]
CountOrZero = Annotated[int, BeforeValidator(_integral), Field(ge=0, le=10**16, strict=True)]
Fraction = Annotated[float, Field(ge=1e-3, le=1)]
PrecisionName = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


@functools.cache
def _switch(model: type[BaseModel], name: str) -> tuple[bool, bool]:
    """(whether the field takes a boolean, whether it takes null): fixed per field, and asked
    for every field of every scenario validated, so worked out once."""
    annotation = model.model_fields[name].annotation
    return _takes_bool(annotation), type(None) in get_args(annotation)


class Strict(BaseModel):
    # no infinity or NaN from YAML (.inf, .nan): only `unlimited` bandwidths are infinite
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_only_for_switches(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's true/yes/on are booleans, which pydantic would read as 1 where a number is
        expected (zero_stage: true as ZeRO 1, efficiency: yes as 1.0), and 1 or 0 as a
        boolean: a boolean field takes true or false, and only a boolean field does."""
        switch, optional = _switch(cls, info.field_name)
        if isinstance(value, bool) and not switch:
            field = cls.model_fields[info.field_name]
            kind = unit_kind(field.annotation, field.metadata)
            what = f"{kind.label} with a unit, such as '{kind.example}'" if kind else None
            what = what or _expected(field.annotation)
            raise CodedError("E-TYPE", f"expected {what}, not true or false")
        if switch and not isinstance(value, bool) and not (value is None and optional):
            got = "null" if value is None else repr(value)
            raise CodedError("E-TYPE", f"expected true or false (got {got})")
        return value


def plain_fields(model: BaseModel) -> dict[str, Any]:
    """Each field of `model` and its value, as `model.model_dump()` gives a model's plain fields
    (a string, a number, a boolean or None: its dump is the value itself; a nested model's field
    is the model here, not its dump). A new dict of the model's own values, read in C: pydantic's
    serializer walk costs about 11,000 instructions a call, and a point asked it 52 times for
    a handful of flat sections (precision, shard, placement). tests/test_fixed_once.py holds it
    equal to `model_dump()` on every plain field of every shipped scenario's sections."""
    return dict(model.__dict__)


def _expected(annotation: Any) -> str:
    """What a field takes, in words: 'a number', "one of 'a', 'b'", or both."""
    origin = get_origin(annotation)
    if origin is Literal:
        names = [repr(a) for a in get_args(annotation)]
        return names[0] if len(names) == 1 else "one of " + ", ".join(names)
    if origin is Annotated:
        return _expected(get_args(annotation)[0])
    if annotation in (int, float):
        return "a number"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a mapping (keys: {', '.join(annotation.model_fields)})"  # a section
    options = [a for a in get_args(annotation) if a is not type(None)]
    return " or ".join(dict.fromkeys(_expected(a) for a in options)) if options else "a value"
