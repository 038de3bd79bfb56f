"""The engine's dependency graph of a schedule: what each op waits for, what waits for each,
and how many ops each step has (tiersim.engine.core builds the graph only for its event
loop; a chain is walked without it: tiersim.engine.chain)."""

from __future__ import annotations

import operator

from tiersim.engine.ops import Op, OpKind
from tiersim.hardware.topology import Topology

MOVE = OpKind.MOVE
_DEPS, _STEP = operator.attrgetter("deps"), operator.attrgetter("step")


def dependency_graph(
    ops: list[Op], topo: Topology, ordered: bool
) -> tuple[list[int], list[list[int]]]:
    """How many ops each op waits for and the ops waiting for each (in index order: the order
    they start in when freed together): one pass over the ops, the cheapest in Python (a
    list per op; compressed rows cost two passes)."""
    deps_of = list(map(_DEPS, ops))
    if ordered:
        deps_of = [(*deps, *x) for deps, x in zip(deps_of, _link_order(ops, topo), strict=True)]
    waiting = list(map(len, deps_of))
    dependents: list[list[int]] = [[] for _ in ops]
    for i, deps in enumerate(deps_of):
        for d in deps:
            dependents[d].append(i)
    return waiting, dependents


def ops_per_step(ops: list[Op], steps: int) -> list[int]:
    """How many ops each step has (a schedule's ops are of its steps: one step's are all
    its own, counted without reading each)."""
    if steps == 1:
        return [len(ops)]
    step_of = list(map(_STEP, ops))
    return [step_of.count(step) for step in range(steps)]


def _link_order(ops: list[Op], topo: Topology) -> list[list[int]]:
    """For `ordered` sharing: each transfer also waits for the previous transfer (in issue
    order) on every link direction or network channel it uses, so none overlap on a link. A
    copy within one tier (a checkpoint to the tier a class is homed on) crosses no link,
    only that tier's ports: the transfers through those ports are ordered on them too, or
    it and a transfer through a link would each take the whole port (run_alone). A
    collective that moves no bytes (the wait for what of an overlapped all-to-all outlasts
    the computation beside it, tiersim/workload/experts.py `overlapped`) holds no link: its
    bytes flow in a transfer of their own, which takes its place in the queue."""
    routes = {
        i: topo.route(op.src, op.dst, op.nbytes) for i, op in enumerate(ops) if op.kind is MOVE
    }
    ports = {r for route in routes.values() if not route.links for r in route.resources}
    last: dict[tuple, int] = {}
    extra: list[list[int]] = []
    for i, op in enumerate(ops):
        if op.kind is MOVE:
            route = routes[i]
            keys = [*route.links, *(r for r in route.resources if r in ports)]
        elif op.kind.network and op.nbytes:
            keys = [op.resource]
        else:
            keys = []
        extra.append(sorted({last[k] for k in keys if k in last} - set(op.deps)))
        for k in keys:
            last[k] = i
    return extra
