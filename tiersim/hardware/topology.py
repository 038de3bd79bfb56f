"""Tiers and links as a graph, and the route a transfer between two tiers takes.

A transfer from tier A to tier B crosses, in order: A's read port, each link direction
on its route, the read and write ports of every tier it is staged through, and B's write
port. Each of those is a shared resource with a bandwidth (bytes/s).
"""

from __future__ import annotations

import heapq
import itertools
import math
from functools import cached_property

from tiersim.config.execution import Execution
from tiersim.config.fields import plain_fields
from tiersim.config.schema import Hardware, Tier
from tiersim.core.errors import Problem
from tiersim.core.records import record
from tiersim.hardware.resources import LinkDirection, Port, Resource, TierPort
from tiersim.state.classes import CHECKPOINTED, STATE_CLASSES


@record
class Route:
    tiers: tuple[str, ...]  # source, staging tiers..., destination
    links: tuple[LinkDirection, ...]  # per hop
    resources: tuple[Resource, ...]
    hop_bandwidths: tuple[float, ...]  # nominal bandwidth of each hop (link, ports)
    latency_s: float  # access latency of the source + every link's latency

    @property
    def bottleneck(self) -> float:
        return min(self.hop_bandwidths) if self.hop_bandwidths else math.inf

    @cached_property
    def link_names(self) -> tuple[str, ...]:
        """The links it crosses, each once, in order: found once a route (a route is shared
        by every Topology of its graph and never changes), not once a reading of its bytes."""
        return tuple(dict.fromkeys(hop.link for hop in self.links))


# Routes found, shared by every Topology of the same graph: a sweep builds one per point, and
# its points share a few graphs. A route is a function of the graph's figures alone (the tiers'
# bandwidths and latencies, the links in order), which key it; Routes are immutable.
_ROUTES: dict[tuple, dict[tuple[str, str, float], Route | None]] = {}
_GRAPHS_KEPT = 64


def _routes_of(hardware: Hardware) -> dict[tuple[str, str, float], Route | None]:
    """The routes found so far on `hardware`'s graph (filled as they are asked for)."""
    key = (
        tuple((n, t.read_bw, t.write_bw, t.latency) for n, t in hardware.tiers.items()),
        tuple((n, lk.between, lk.bandwidth, lk.latency) for n, lk in hardware.links.items()),
    )
    routes = _ROUTES.get(key)
    if routes is None:
        if len(_ROUTES) >= _GRAPHS_KEPT:
            del _ROUTES[next(iter(_ROUTES))]  # the oldest graph
        routes = _ROUTES[key] = {}
    return routes


class Topology:
    """The tiers and links of one GPU's view of the machine."""

    def __init__(self, hardware: Hardware):
        self.hardware = hardware
        # an undirected graph: tier -> neighbour -> the link (one per pair, the last given),
        # neighbours in the order their links are listed
        self.adjacent: dict[str, dict[str, dict]] = {t: {} for t in hardware.tiers}
        for name, link in hardware.links.items():
            a, b = link.between
            edge = {"name": name, "bandwidth": link.bandwidth, "latency": link.latency}
            previous = self.adjacent.setdefault(a, {}).get(b)
            if previous is not None:  # a second link between the same tiers replaces it
                previous.update(edge)
                continue
            self.adjacent[a][b] = edge
            self.adjacent.setdefault(b, {})[a] = edge
        self._routes = _routes_of(hardware)

    @cached_property
    def capacities(self) -> dict[Resource, float]:
        caps: dict[Resource, float] = {}
        for name, tier in self.hardware.tiers.items():
            caps[TierPort(name, Port.READ)] = tier.read_bw
            caps[TierPort(name, Port.WRITE)] = tier.write_bw
        for name, link in self.hardware.links.items():
            a, b = link.between
            caps[LinkDirection(name, a, b)] = link.bandwidth
            caps[LinkDirection(name, b, a)] = link.bandwidth
        return caps

    def route(self, src: str, dst: str, nbytes: float = math.inf) -> Route | None:
        """The quickest route for a transfer of `nbytes` alone: least latency + bytes over the
        bottleneck (for an unsized transfer: widest, then least latency), then fewest hops;
        None if the tiers are not connected."""
        key = (src, dst, nbytes)
        if key not in self._routes:
            self._routes[key] = self._find_route(src, dst, nbytes)
        return self._routes[key]

    def _find_route(self, src: str, dst: str, nbytes: float) -> Route | None:
        if src == dst:  # a copy within one tier: read out and written back
            tier = self.hardware.tiers[src]
            return Route(
                (src, src),
                (),
                (TierPort(src, Port.READ), TierPort(src, Port.WRITE)),
                (tier.read_bw, tier.write_bw),
                tier.latency,
            )
        candidates = [self._make_route(p) for p in self.candidate_paths(src, dst)]
        if not candidates:
            return None

        def cost(r: Route) -> tuple:
            alone = r.latency_s + nbytes / r.bottleneck if math.isfinite(nbytes) else 0.0
            return (alone, -r.bottleneck, r.latency_s, len(r.links))

        return min(candidates, key=cost)

    def candidate_paths(self, src: str, dst: str) -> list[list[str]]:
        """For each width the graph offers, the least-latency (then fewest-hop) path over the
        links and tiers at least that wide: every path worth considering, found without
        enumerating paths (a Dijkstra on (latency, hops) per width)."""
        tiers = self.hardware.tiers
        widths = sorted(
            {e["bandwidth"] for near in self.adjacent.values() for e in near.values()}
            | {t.read_bw for t in tiers.values()}
            | {t.write_bw for t in tiers.values()},
            reverse=True,
        )
        paths = []
        for width in widths:
            if tiers[src].read_bw < width or tiers[dst].write_bw < width:
                continue
            path = self._fastest_path(src, dst, width)
            if path is not None and path not in paths:
                paths.append(path)
        return paths

    def _fastest_path(self, src: str, dst: str, width: float) -> list[str] | None:
        tiers = self.hardware.tiers
        best = {src: (0.0, 0)}
        parent: dict[str, str] = {}
        heap = [(0.0, 0, src)]
        done: set[str] = set()
        while heap:
            latency, hops, node = heapq.heappop(heap)
            if node in done:
                continue
            done.add(node)
            if node == dst:
                break
            for nxt, edge in self.adjacent[node].items():
                staged = nxt != dst and min(tiers[nxt].read_bw, tiers[nxt].write_bw) < width
                if nxt in done or edge["bandwidth"] < width or staged:
                    continue
                label = (latency + edge["latency"], hops + 1)
                if nxt not in best or label < best[nxt]:
                    best[nxt] = label
                    parent[nxt] = node
                    heapq.heappush(heap, (*label, nxt))
        if dst not in done:
            return None
        path = [dst]
        while path[-1] != src:
            path.append(parent[path[-1]])
        return path[::-1]

    def _make_route(self, path: list[str]) -> Route:
        tiers = self.hardware.tiers
        resources: list[Resource] = [TierPort(path[0], Port.READ)]
        bandwidths = [tiers[path[0]].read_bw]
        links, latency = [], tiers[path[0]].latency
        for i, (a, b) in enumerate(itertools.pairwise(path)):
            edge = self.adjacent[a][b]
            hop = LinkDirection(edge["name"], a, b)
            links.append(hop)
            resources.append(hop)
            bandwidths.append(edge["bandwidth"])
            latency += edge["latency"]
            resources.append(TierPort(b, Port.WRITE))
            bandwidths.append(tiers[b].write_bw)
            if i < len(path) - 2:  # staged through b: written, then read out again
                resources.append(TierPort(b, Port.READ))
                bandwidths.append(tiers[b].read_bw)
        return Route(tuple(path), tuple(links), tuple(resources), tuple(bandwidths), latency)


def placement_problems(execution: Execution, machine: Hardware, topo: Topology) -> list[Problem]:
    """Every movement the placement implies must have a route (else exit 2, with the reason)."""
    gpu, cpu = machine.gpu.memory, machine.cpu.memory
    where = gpu if execution.placement.optimizer_compute == "gpu" else cpu
    home = plain_fields(execution.placement)
    needs = [
        (f"placement.{c.name}", home[c.name], gpu, f"the GPU ({gpu})")
        for c in STATE_CLASSES
        if c.placed and c.compute
    ]
    needs += [
        (
            f"placement.{c.name}",
            home[c.name],
            where,
            f"where the optimizer runs ({execution.placement.optimizer_compute}: {where})",
        )
        for c in STATE_CLASSES
        if c.placed and c.precision is not None
    ]
    own = plain_fields(execution.placement.experts)  # the routed experts' homes: same routes
    for path, _, other, what in list(needs):
        cls = path.removeprefix("placement.")
        if own.get(cls) is not None:
            needs.append((f"placement.experts.{cls}", own[cls], other, what))
    problems = []
    for path, home, other, what in needs:
        if home in machine.tiers and other in machine.tiers and not topo.route(home, other):
            problems.append(
                Problem(
                    path,
                    f"tier '{home}' has no route to {what}; add a link "
                    f"under hardware.links or home it elsewhere",
                    "E-ROUTE",
                )
            )
    problems += _checkpoint_route_problems(execution, machine.tiers, topo)
    computes = machine.tiers[cpu].behaviour.cpu_computes_there
    if execution.placement.optimizer_compute == "cpu" and not computes:
        problems.append(
            Problem(
                "hardware.cpu.memory",
                f"the CPU optimizer runs in host memory, "
                f"but tier '{cpu}' is of kind {machine.tiers[cpu].kind}",
                "E-ROUTE",
            )
        )
    return list(dict.fromkeys(problems))  # the same pair can be needed twice


def _checkpoint_route_problems(
    execution: Execution, tiers: dict[str, Tier], topo: Topology
) -> list[Problem]:
    """A simulated checkpoint must reach its target from every class's home (through the
    staging tier when async)."""
    ck = execution.checkpoint
    if not execution.checkpoint_simulated or ck.target not in tiers:
        return []
    home, own = execution.placement.model_dump(), execution.placement.experts.model_dump()
    hops = [(home[c], ck.target) for c in CHECKPOINTED]
    hops += [(own[c], ck.target) for c in CHECKPOINTED if own.get(c) is not None]
    if ck.mode == "async" and ck.staging in tiers:
        hops = [(home, ck.staging) for home, _ in hops] + [(ck.staging, ck.target)]
    missing = sorted({(a, b) for a, b in hops if a in tiers and not topo.route(a, b)})
    return [
        Problem(
            "checkpoint.target" if b == ck.target else "checkpoint.staging",
            f"no route from '{a}' to '{b}' for the checkpoint; add a link under "
            "hardware.links or choose another tier",
            "E-ROUTE",
        )
        for a, b in missing
    ]
