"""The search space of `tiersim plan`: which key paths take which values, and its candidates.

The space is the scenario's `plan:` section (key path -> values), or by default the choices a
planner usually leaves open (DEFAULT_KEYS) that the scenario's framework can express: under
`training.framework: megatron` (Megatron-LM without offload, config/consistency.py) no class's
home and no optimizer site, which the scenario refuses for every value but the GPU's own
(review (k): 69,840 of 69,984 default candidates invalid). A `plan:` section is searched as
written. Micro-batch size and gradient accumulation vary
together at the scenario's batch per GPU (micro_batch_size x grad_accumulation): a value of
one fixes the other, and a pair off that batch is not a candidate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

from tiersim.config.overrides import parse_override
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem, shown
from tiersim.core.records import record
from tiersim.state.classes import PLACED
from tiersim.sweep.paths import path_problem

MBS, GA = "training.micro_batch_size", "training.grad_accumulation"
HOMES = list(PLACED)  # the classes with a home tier of their own
MICRO_BATCHES = (1, 2, 4, 8)
PREFETCH = (1, 2, 4)


@record
class Space:
    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    batch: int  # micro_batch_size x grad_accumulation, held fixed
    from_file: bool  # the scenario's plan: section (else the default space)
    # the default space's keys left out, and why: (paths, the framework's reason)
    left_out: tuple[tuple[str, ...], str] | None = None

    @property
    def size(self) -> int:
        """Candidates before anything is pruned (the product of the value counts)."""
        return math.prod(len(v) for v in self.values)

    def shape(self) -> str:
        """'placement.weights 4 x training.recompute 3 x ...', the most values first."""
        pairs = sorted(zip(self.keys, self.values, strict=True), key=lambda kv: -len(kv[1]))
        return " x ".join(f"{k} {len(v)}" for k, v in pairs)


# why a scenario refuses every value of a default key but its own, or some values of one
WITHOUT_OFFLOAD = (
    "training.framework: megatron models Megatron-LM without offload, its "
    "--optimizer-cpu-offload not modelled: every class stays in the GPU's memory and the "
    "optimizer on the GPU"
)
APEX_ZERO = (
    "training.distributed_optimizer: apex shards the optimizer state over the data ranks and "
    "keeps a whole gradient buffer: ZeRO 1 only"
)
INTERLEAVED = (
    "interleaving needs the micro-batches (the batch per GPU {batch} over the micro-batch "
    "size) to be a multiple of the pipeline size ({pipeline})"
)
LeftOut = tuple[tuple[str, ...], str]  # key paths or `path=value`s, and why


def left_out(s: Scenario) -> list[LeftOut]:
    """What the default space leaves out as the scenario refuses it for every candidate:
    under megatron each class's home and the optimizer's site (config/consistency.py
    `_framework_problems` refuses any but the GPU's memory and the GPU), under apex's
    distributed optimizer the ZeRO stage (config/distributed_optimizer.py: 1 only), and under
    an interleaved pipeline the micro-batch sizes whose micro-batches are no multiple of the
    pipeline size (config/layout_checks.py; review (k): 69,840 of 69,984 default candidates
    of a megatron scenario were invalid, 108 of 144 of NeMo's apex scenarios after that)."""
    out: list[LeftOut] = []
    if s.training.framework == "megatron":
        homes = tuple(f"placement.{c}" for c in HOMES)
        out.append(((*homes, "placement.optimizer_compute"), WITHOUT_OFFLOAD))
    if s.training.distributed_optimizer == "apex" and s.parallel.data > 1:
        out.append((("parallel.zero_stage",), APEX_ZERO))
    p, batch = s.parallel, s.training.micro_batch_size * s.training.grad_accumulation
    if p.virtual_pipeline > 1:
        off = [m for m in _micro_batches(batch) if (batch // m) % p.pipeline]
        if off:
            why = INTERLEAVED.format(batch=batch, pipeline=p.pipeline)
            out.append((tuple(f"{MBS}={m}" for m in off), why))
    return out


def _micro_batches(batch: int) -> list[int]:
    return [m for m in MICRO_BATCHES if batch % m == 0]


def default_space(s: Scenario) -> dict[str, list[Any]]:
    """Each class's home among the machine's tiers, where the optimizer runs, the ZeRO stage
    (with data parallelism), recompute, the micro-batch size at the batch per GPU, prefetch
    depth and, where failures are modelled, the checkpoint interval (as given, or Daly's);
    less what the scenario refuses for every candidate (`left_out`)."""
    tiers = list(s.hardware.tiers)
    space: dict[str, list[Any]] = {f"placement.{c}": tiers for c in HOMES}
    space["placement.optimizer_compute"] = ["gpu", "cpu"]
    if s.parallel.data > 1:
        space["parallel.zero_stage"] = [0, 1, 2, 3]
    space["training.recompute"] = ["none", "selective", "full"]
    batch = s.training.micro_batch_size * s.training.grad_accumulation
    space[MBS] = _micro_batches(batch)
    space["simulation.prefetch_depth"] = list(PREFETCH)
    failures = s.failures.mtbf is not None or s.failures.gpu_mtbf is not None
    if failures and s.checkpoint.every_steps not in (None, "auto"):
        space["checkpoint.every_steps"] = [s.checkpoint.every_steps, "auto"]
    for items, _ in left_out(s):
        for item in items:
            path, _, value = item.partition("=")
            space[path] = [v for v in space[path] if value and str(v) != value]
    return {path: values for path, values in space.items() if values}  # a key left out whole


def build_space(s: Scenario, resolved: dict[str, Any]) -> tuple[Space, list[Problem]]:
    """The scenario's space, and the problems of its plan: section (unknown paths)."""
    given = s.plan
    chosen = dict(given) if given else default_space(s)
    problems = []
    for path, values in chosen.items():
        keys = path.split(".")
        why = "a plan cannot search its own plan: section" if keys[0] == "plan" else None
        why = why or path_problem(keys, resolved) or _values_problem(values)
        if why:
            problems.append(Problem(f"plan.{path}", why, "E-PLAN"))
    if problems:
        return Space((), (), 1, True), problems
    values = tuple(tuple(v) for v in chosen.values())  # as written: duplicates were refused
    batch = s.training.micro_batch_size * s.training.grad_accumulation
    left = () if given else tuple(left_out(s))
    return Space(tuple(chosen), values, batch, bool(given), left), problems


def _values_problem(values: Any) -> str | None:
    if not isinstance(values, list):  # the value itself in the example: [3] for 3
        example = f"[{values}]" if isinstance(values, str | int | float) else "[1, 2, 4]"
        return f"is {values!r} (expected a list of the values to consider, e.g. {example})"
    if not values:
        return "is an empty list (expected at least one value to consider)"
    if any(isinstance(v, dict | list) for v in values):
        return "holds a mapping or a list (expected single values, e.g. [1, 2, 4])"
    return _duplicate(values)


def _duplicate(values: list[Any]) -> str | None:
    """A value listed twice is refused, not searched once: a repeated item is most likely a
    typo for another value (say [hbm, hbm] for [hbm, hbf]) that would go unsearched. Equal
    values of different types (1 and 1.0) are not the same item; if they build the same
    scenario, the search counts the second as a duplicate."""
    first: dict[tuple[type, Any], int] = {}
    for i, v in enumerate(values):
        j = first.setdefault((type(v), v), i)
        if j != i:
            return (
                f"lists {shown(v)} twice (items {j} and {i}; expected each value once: "
                "remove the repeat or correct it to the value meant)"
            )
    return None


def candidates(
    space: Space, start: int = 0, stop: int | None = None
) -> Iterator[tuple[tuple[str, Any], ...]]:
    """Every combination (those at positions `start` to `stop` of the space's product, the
    last key's values turning fastest) as (path, value) pairs, the coupled batch pair
    completed; combinations off the batch per GPU are skipped."""
    for combo in itertools.islice(itertools.product(*space.values), start, stop):
        chosen = dict(zip(space.keys, combo, strict=True))
        pairs = _batch_pair(chosen, space.batch)
        if pairs is None:
            continue
        yield tuple((k, v) for k, v in chosen.items() if k not in (MBS, GA)) + pairs


def _batch_pair(chosen: dict[str, Any], batch: int) -> tuple[tuple[str, Any], ...] | None:
    mbs, ga = chosen.get(MBS), chosen.get(GA)
    if mbs is None and ga is None:
        return ()
    if mbs is not None and ga is not None:
        return ((MBS, mbs), (GA, ga)) if _int(mbs) and _int(ga) and mbs * ga == batch else None
    known = mbs if mbs is not None else ga
    if not _int(known) or known < 1 or batch % known:
        return None
    other = batch // known
    return ((MBS, known), (GA, other)) if mbs is not None else ((MBS, other), (GA, known))


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def override_text(path: str, value: Any) -> str:
    """`path=value` as --set reads it back to the same value."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    else:
        text = str(value)
    if parse_override(f"{path}={text}")[1] != value:
        text = repr(str(value)) if isinstance(value, str) else text
    return f"{path}={text}"
