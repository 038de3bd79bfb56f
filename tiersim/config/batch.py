"""`training.global_batch_size`: the batch a training plan is written in, sequences per
optimizer step over the whole job. global = micro_batch_size x grad_accumulation x
parallel.data, so given it, the gradient accumulation follows; checked here, on the mapping
(presets resolved) before validation, so that the problem names the key and what would
divide."""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import Problem


def _count(value: Any) -> int | None:
    """A whole number >= 1 as the schema would take it, else None (the schema says why)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def _divisors(n: int, limit: int = 8) -> str:
    found = [d for d in range(1, min(n, 100_000) + 1) if n % d == 0]
    shown = found[:limit]
    return ", ".join(map(str, shown)) + (", ..." if len(found) > limit else "")


def derive_accumulation(resolved: dict[str, Any]) -> list[Problem]:
    """Set `training.grad_accumulation` from `training.global_batch_size` in `resolved` (a
    scenario mapping, changed in place); the problems where it cannot be."""
    training = resolved.get("training")
    if not isinstance(training, dict):
        return []
    total = _count(training.get("global_batch_size"))
    if total is None:
        return []
    parallel = resolved.get("parallel")
    parallel = parallel if isinstance(parallel, dict) else {}
    micro = _count(training.get("micro_batch_size", 1))
    data = _count(parallel.get("data", 1))
    if micro is None or data is None:
        return []
    per_step = micro * data
    if total % per_step:
        lower, upper = total // per_step * per_step, (total // per_step + 1) * per_step
        near = f"{lower} or {upper}" if lower else f"{upper}"
        why = (
            f"{total} sequences are not training.micro_batch_size {micro} x parallel.data "
            f"{data} x a whole grad_accumulation (expected a multiple of {per_step}, e.g. "
            f"{near}; or micro_batch_size x data dividing {total}: {_divisors(total)})"
        )
        return [Problem("training.global_batch_size", why, "E-LAYOUT")]
    derived = total // per_step
    given = training.get("grad_accumulation")
    if given is not None and given != derived:
        why = (
            f"{given} disagrees with training.global_batch_size {total} / (micro_batch_size "
            f"{micro} x parallel.data {data}) = {derived} (expected one of the two, or both "
            "agreeing)"
        )
        return [Problem("training.grad_accumulation", why, "E-LAYOUT")]
    training["grad_accumulation"] = derived
    return []


def sequences_per_accumulation(scenario: Any) -> int | None:
    """The sequences one gradient-accumulation step adds to the global batch (micro_batch_size
    x parallel.data), where the scenario is written in `training.global_batch_size` (a plan
    written so reads a remedy as a global batch too); None otherwise."""
    t = scenario.training
    return None if t.global_batch_size is None else t.micro_batch_size * scenario.parallel.data
