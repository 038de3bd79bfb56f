"""tiersim.api's arguments, checked where they are given: an argument of the wrong kind is a
TypeError naming the argument and what it takes, and a value the command line would refuse
(`--gpus 0`, `--emit jax`) an InputError as it is there, rather than an AttributeError or a
KeyError from deep inside."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tiersim.config.load import API_OVERRIDES, Loaded, load_scenario
from tiersim.config.load import build as build_loaded
from tiersim.core.errors import InputError, Problem


def override_texts(overrides: Any) -> list[str]:
    """`{"parallel.data": 16}` or `["parallel.data=16"]` (or one text) as --set texts."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        from tiersim.frameworks.mapping import as_yaml  # values written as YAML, for these only

        return [f"{path}={as_yaml(value)}" for path, value in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    texts = list(overrides) if isinstance(overrides, Iterable) else None
    if texts is None or not all(isinstance(t, str) for t in texts):
        raise TypeError(
            f"overrides: expected a mapping of key path -> value or PATH=VALUE texts "
            f'(e.g. {{"parallel.data": 16}} or ["parallel.data=16"]), got {overrides!r:.80}'
        )
    return texts


def scenario_mapping(mapping: Any) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        raise TypeError(
            f"api.build: expected a mapping (a scenario as a YAML file gives it), got "
            f"{type(mapping).__name__}"
        )
    return dict(mapping)


def as_loaded(scenario: Any, what: str) -> Loaded:
    """A Loaded as it is; a scenario file's path loaded, a mapping built (each as api.load and
    api.build do); anything else a TypeError saying what `what` takes."""
    if isinstance(scenario, Loaded):
        return scenario
    if isinstance(scenario, str | Path):
        return load_scenario(scenario, [], API_OVERRIDES)
    if isinstance(scenario, Mapping):
        return build_loaded(dict(scenario), Path.cwd(), "<api>", [], API_OVERRIDES)
    raise TypeError(
        f"{what}: expected a scenario (api.load(path), api.build(mapping)), a scenario "
        f"file's path or a mapping, got {type(scenario).__name__}"
    )


def compared(a: Any, b: Any, a_report: Any, b_report: Any) -> tuple[Loaded, Loaded]:
    """api.compare's arguments: two scenarios (as api.run takes them) and two reports, each a
    mapping with the `step` a run's report carries; a TypeError naming the one that is not."""
    scenarios = as_loaded(a, "api.compare: a"), as_loaded(b, "api.compare: b")
    for name, report in (("a_report", a_report), ("b_report", b_report)):
        if not isinstance(report, Mapping) or not isinstance(report.get("step"), Mapping):
            got = type(report).__name__ if not isinstance(report, Mapping) else "no `step`"
            raise TypeError(
                f"api.compare: {name}: expected a run's report (api.run(scenario).report, or a "
                f"results folder's report.json read), got {got}"
            )
    return scenarios


def axis_values(path: str, values: Any) -> list[Any]:
    """A sweep axis's values: a list (or another iterable that is not text) of one or more."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        why = f"{values!r:.60}: expected a list of values, e.g. [1, 2, 4]"
        raise InputError("api.sweep", [Problem(path, why, "E-SWEEP")])
    listed = list(values)
    if not listed:
        why = "no values (expected a list of one or more)"
        raise InputError("api.sweep", [Problem(path, why, "E-SWEEP")])
    return listed


def gpus_given(gpus: Any) -> int | None:
    """import's world size: None (from the configs) or a whole number >= 1, as --gpus."""
    if gpus is None or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1):
        return gpus
    why = f"{gpus!r:.40}: expected a whole number >= 1 (the job's GPUs), or None"
    raise InputError("api.import_configs", [Problem("gpus", why, "E-OPTION")])


def plan_asked(objective: Any, top: Any) -> None:
    """api.plan's objective and top, as `tiersim plan --objective` and `--top` take them."""
    from tiersim.plan import OBJECTIVES

    if objective not in OBJECTIVES:
        why = f"{objective!r:.40}: expected one of {', '.join(OBJECTIVES)}"
        raise InputError("api.plan", [Problem("objective", why, "E-OPTION")])
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        why = f"{top!r:.40}: expected a whole number >= 1 (the plans to keep)"
        raise InputError("api.plan", [Problem("top", why, "E-OPTION")])
