"""One rulebook: what `validate` refuses of a scenario, `run`, `sweep` and `plan` refuse too.

A scenario is checked in three layers: its file (YAML, keys, types, units: the loader), what
only a run would otherwise find (routes for every movement, the wear and checkpoint inputs:
`runner.check_runnable`), and its `plan:` section as `tiersim plan` searches it (key paths,
values listed once, its size, each value on its own: `plan.check.checked_space`). Each command
that takes a scenario applies all three before it does anything (`inventory`, `wear` and
`compare` too, which do not use a `plan:` section), so none of them can run, or write back
into a results folder, a scenario another refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.config.load import Loaded, blamed_on_overrides
from tiersim.config.overrides import apply_overrides
from tiersim.config.yamlfile import read_yaml
from tiersim.core.errors import InputError
from tiersim.runner import check_runnable

if TYPE_CHECKING:
    from tiersim.plan.space import Space


def check_scenario(loaded: Loaded, path: Path, raw: dict[str, Any] | None = None) -> None:
    """Raise InputError (exit 2) for what `tiersim validate` refuses of the loaded scenario:
    `path` its file (the plan's values are built beside it); `raw` its mapping with the
    overrides applied, read again from `path` where not given (only for a plan: section)."""
    check_runnable(loaded)
    check_plan_section(loaded, path, raw)


def check_plan_section(
    loaded: Loaded, path: Path, raw: dict[str, Any] | None = None, always: bool = False
) -> Space | None:
    """The plan: section's checks alone: its space, None for a scenario without one (unless
    `always`: `tiersim plan` searches a default space then, checked the same way)."""
    if loaded.scenario.plan is None and not always:
        return None
    from tiersim.plan.check import checked_space  # a plan: section only (run imports none)

    if raw is None:
        source = str(path)
        raw = apply_overrides(read_yaml(path, source), list(loaded.overrides), source)
    try:
        return checked_space(loaded, raw, path)
    except InputError as exc:  # a problem a --set made says which (the line is the file's)
        problems = blamed_on_overrides(exc.problems, loaded.overrides, loaded.origin)
        raise InputError(exc.source, problems) from None
