"""The engine's shortcuts against the way they stand in for, on one scenario (docs/invariants.md,
g): an async checkpoint's copy worked out in closed form (tiersim.engine.closed_copy) against
the copy simulated, and an interleaved stage measured from one period (margins.one_period)
against two periods compared. Each is forced off by replacing the module attribute its caller
reads, as tests/test_copy_queues.py does; shared by benchmarks/explore_invariants.py and
tests/test_invariants_newer.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tiersim import api
from tiersim.engine import checkpoint_apart, margins

# report.json's bookkeeping of how a point was run, not a figure of it
BOOKKEEPING = ("sim.",)
REL = 1e-9  # both ways: the same model, its sums in another order


def _run_with(module: Any, name: str, wrap: Callable[[Callable], Callable], raw: dict) -> dict:
    real = getattr(module, name)
    setattr(module, name, wrap(real))
    try:
        return api.run(api.build(raw)).report
    finally:
        setattr(module, name, real)


def _flat(x: Any, path: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _flat(val, f"{path}.{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _flat(val, f"{path}[{i}]").items()}
    return {path[1:]: x}


def differences(a: dict, b: dict, skip: tuple[str, ...] = BOOKKEEPING) -> list[str]:
    """Where two reports differ beyond round-off: bytes and words exactly, seconds within
    REL relative; `skip`: key paths (prefixes) left out."""
    fa, fb = _flat(a), _flat(b)
    out = []
    for key in sorted(fa.keys() | fb.keys()):
        if key.startswith(skip):
            continue
        x, y = fa.get(key), fb.get(key)
        if isinstance(x, float) or isinstance(y, float):
            if x is None or y is None or not math.isclose(x, y, rel_tol=REL, abs_tol=1e-15):
                out.append(f"{key}: {x} != {y}")
        elif x != y:
            out.append(f"{key}: {x!r} != {y!r}")
    return out


def closed_copy_differs(raw: dict) -> tuple[str, list[str]]:
    """What the closed form answered ('closed', its reason why not, or 'not asked'), and
    where the report differs from the copy simulated (only where it answered 'closed')."""
    answers: list[str] = []

    def record(real: Callable) -> Callable:
        def answered(*args):
            out = real(*args)
            answers.append("closed" if not isinstance(out, str) else out)
            return out

        return answered

    closed = _run_with(checkpoint_apart, "closed_copy", record, raw)
    if "closed" not in answers:
        return (answers[0] if answers else "not asked"), []
    forced = _run_with(checkpoint_apart, "closed_copy", lambda _: lambda *a: "forced", raw)
    return "closed", differences(closed, forced)


def one_period_differs(raw: dict) -> tuple[bool, list[str]]:
    """Whether one period was tried (margins.one_period), and where the report differs from
    two periods compared (only where it was tried)."""
    tried: list[bool] = []

    def record(real: Callable) -> Callable:
        def asked(*args):
            tried.append(real(*args))
            return tried[-1]

        return asked

    one = _run_with(margins, "one_period", record, raw)
    if not any(tried):
        return False, []
    two = _run_with(margins, "one_period", lambda _: lambda *a: False, raw)
    return True, differences(one, two)
