"""An upper bound on a candidate's step (its period: the step with its share of a durable
checkpoint's stall), from its workload alone, so that `tiersim plan` can tell, without
simulating, that a plan cannot hold a flash tier's wear budget: a budget holds only at a
step no shorter than the tier's wear floor (tiersim.plan.bound.wear_floor), and a plan whose
step cannot be that long wears the tier past it.

The engine never idles: at every instant of a step some operation is under way (one waits
only for another to end), and operations that share a resource share its bandwidth. So a
step takes at most the time of all its operations run one after another, each alone:
- the GPU's forward, backward and recompute of every unit and micro-batch, its optimizer,
  the CPU's optimizer and the pipeline's idle time;
- every move of a class between tiers, each over its route's hops one after another
  (latency, then the bytes over each hop's bandwidth in turn: as if staged, not streamed),
  counted at least as often as the schedule makes it (tiersim.engine.schedule): weights
  homed off the GPU fetched for each micro-batch's forward and backward (and once more for
  the update), gradients homed off it written after each backward and read back for the
  next and for the update, activations homed off it written out and fetched back each
  micro-batch, optimizer state and master weights homed off the device that updates them
  read and written back, and for an update off the GPU its gradients sent there and its
  weights sent back;
- every collective: the tensor-, expert- and context-parallel ones of every micro-batch,
  the data-parallel weight gathers of every forward and backward, gradient reductions of
  every micro-batch, the updated parameters gathered.
With a durable checkpoint the period adds its stall over the interval; the stall is at most
the copy of every checkpointed class (straight to the target and through its staging tier
as well, each over its route alone) plus the whole checkpoint run's steps (the run that
measures it).
`MARGIN` doubles the sum for what this argument leaves out (a route taken under contention
that is slower alone). tests/test_plan_bound.py checks the bound, without the margin, is
never below the simulated period over every shipped scenario and random ones.
"""

from __future__ import annotations

import math

from tiersim.engine.durable import MAX_TRAILING_STEPS
from tiersim.hardware.topology import Topology
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.placement import homes
from tiersim.state.resolved import Resolved
from tiersim.workload.work import Workload

MARGIN = 2.0  # the bound the planner uses: twice the serial sum (module docstring)


class Moves:
    """Moves between tiers, summed by route: a move alone takes its route's latency, then its
    bytes over each hop's bandwidth in turn (as if staged, not streamed), so moves on one
    route take in all their count x the latency + their bytes x the sum of 1 / bandwidth."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.by_route: dict[tuple[str, str], list[float]] = {}  # -> [moves, bytes]

    def add(self, src: str, dst: str, nbytes: float, times: int = 1) -> None:
        if src != dst and nbytes > 0:
            counts = self.by_route.setdefault((src, dst), [0.0, 0.0])
            counts[0] += times
            counts[1] += times * nbytes

    def seconds(self) -> float:
        """inf where a pair has no route (such a candidate is refused before it is run)."""
        total = 0.0
        for (src, dst), (count, nbytes) in self.by_route.items():
            route = self.topo.route(src, dst)  # the widest (one route a pair: cached)
            if route is None:
                return math.inf
            total += count * route.latency_s + nbytes * sum(1 / bw for bw in route.hop_bandwidths)
        return total


def _comm_s(comm, times: int, capacity: dict) -> float:
    if comm is None or (comm.nbytes <= 0 and comm.latency_s <= 0):
        return 0.0
    cap = capacity.get(comm.resource, math.inf)
    return times * (comm.latency_s + (comm.nbytes / cap if cap > 0 else math.inf))


def serial_step_s(res: Resolved, wl: Workload, topo: Topology) -> float:
    """Every operation of one step one after another, each alone (module docstring)."""
    m, units = wl.micro_batches, wl.units
    machine, placement = res.machine, res.execution.placement
    gpu = machine.gpu.memory
    updater = gpu if placement.optimizer_compute == "gpu" else machine.cpu.memory
    base = homes(placement, machine)
    total = m * sum(u.forward_s + u.backward_s + u.recompute_s for u in units)
    total += sum(u.optimizer_gpu_s + u.optimizer_cpu_s for u in units)
    total += wl.bubble_s + wl.bubble_after_s
    moves = Moves(topo)
    cap = wl.net_capacity
    for u in units:
        home = u.home or base
        weights = max(u.weights_full, u.homed.get("weights", 0))
        gradients = max(u.gradients_full, u.homed.get("gradients", 0))
        moves.add(home["weights"], gpu, weights, 2 * (2 * m + 2))
        moves.add(gpu, home["gradients"], gradients, 2 * (2 * m + 2))
        moves.add(gpu, home["activations"], u.activations, 2 * 2 * m)
        for cls in ("optimizer", "master"):
            moves.add(home[cls], updater, u.homed.get(cls, 0), 2)
            moves.add(updater, home[cls], u.homed.get(cls, 0), 2)
        moves.add(gpu, updater, u.gradients_for_update, 2)
        moves.add(updater, gpu, u.weights_updated, 2)
        for comm in (u.tp_forward, u.tp_backward, u.ep_forward, u.ep_backward):
            total += _comm_s(comm, m, cap)
        for comm in (u.cp_forward, u.cp_backward, u.cp_forward_hidden, u.cp_backward_hidden):
            total += _comm_s(comm, m, cap)
        total += _comm_s(u.dp_weights, 2 * m + 2, cap) + _comm_s(u.dp_gradients, m + 1, cap)
        total += _comm_s(u.dp_parameters, 2, cap) + _comm_s(u.embedding_sync, 2, cap)
    return total + moves.seconds()


def checkpoint_copy_s(res: Resolved, wl: Workload, topo: Topology) -> float:
    """Each checkpointed class's bytes copied to the target alone: from its home directly,
    and through the staging tier (a snapshot, then its drain), all one after another."""
    target = res.execution.checkpoint.target
    staging = res.execution.checkpoint.staging
    base = homes(res.execution.placement, res.machine)
    moves = Moves(topo)
    for u in wl.units:
        home = u.home or base
        for cls in CHECKPOINTED:
            nbytes = max(u.homed.get(cls, 0), u.weights_full if cls == "weights" else 0)
            moves.add(home[cls], target, nbytes)
            moves.add(home[cls], staging, nbytes)
            moves.add(staging, target, nbytes)
    return moves.seconds()


def period_upper_s(res: Resolved, wl: Workload, topo: Topology) -> float:
    """The most the step's period can be (module docstring), without `MARGIN`; inf where a
    checkpoint's interval is not known before the run (chosen from its cost)."""
    step = serial_step_s(res, wl, topo)
    if not res.execution.checkpoint_simulated:
        return step
    every = res.execution.checkpoint.every_steps
    if not isinstance(every, int) or isinstance(every, bool):
        return math.inf
    stall = checkpoint_copy_s(res, wl, topo) + (1 + MAX_TRAILING_STEPS) * step
    return step + stall / every
