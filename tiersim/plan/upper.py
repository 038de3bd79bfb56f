"""An upper bound on a candidate's step (its period: the step with its share of a durable
checkpoint's stall), from its workload alone, so that `tiersim plan` can tell, without
simulating, that a plan cannot hold a flash tier's wear budget: a budget holds only at a
step no shorter than the tier's wear floor (tiersim.plan.bound.wear_floor), and a plan whose
step cannot be that long wears the tier past it.

The engine never idles: at every instant of a step some operation is under way (one waits
only for another to end), and operations that share a resource share its bandwidth. So a
step takes at most the time of all its operations run one after another, each alone:
- the GPU's forward, backward and recompute of every unit and micro-batch, the update on
  the device that runs it (engine/schedule_optimizer.py `_compute`: the GPU's or the CPU's,
  never both; both were summed before issue 36's seventh round) and the pipeline's idle
  time;
- every move of a class between tiers, each as long as the engine makes it alone (the
  quickest route for its size: latency, the pipeline's fill, then its bytes at the route's
  bottleneck), carrying what the engine moves (a unit sharded over data parallelism only
  its shard: `tier_bytes`). Weights exactly as often as the schedule moves them, each on
  its own route (`weight_moves`: fetched for each micro-batch's forward and backward,
  through host memory where DeepSpeed's swapper reads them, read for an update with no
  master copy, the updated shard and the gathered rest written home: their only moves).
  Gradients homed off the GPU exactly as often as the schedule moves them in the generic
  engine (`gradient_moves`: written after each backward, read back for the next and for
  the update), and twice that under DeepSpeed or FSDP2. The other classes counted twice as
  often as the schedule makes it (tiersim.engine.schedule: the factor covers the update's
  other paths): optimizer state and master weights homed off the device that updates
  them read and written back, and for an update off the GPU its gradients sent there;
  activations homed off the GPU exactly as
  often as the schedule moves them, each way on its own route (written out after each
  micro-batch's forward and fetched back for its backward: engine/schedule_passes.py,
  their only moves);
- every collective: the tensor-, expert- and context-parallel ones of every micro-batch,
  the data-parallel weight gathers of every forward and backward, gradient reductions of
  every micro-batch, the updated parameters gathered.
With a durable checkpoint the period adds its stall over the interval; the stall is at most
the copy of every checkpointed class (straight to the target and through its staging tier
as well, each over its route alone) plus the whole checkpoint run's steps (the run that
measures it).
Sharing does not break the argument: flows share the links and ports max-min fair
(engine/flows.py), so while any flow runs some resource is saturated, and the flows through
it, each no faster alone than that resource, together progress at least as fast as one flow
alone; a move's route is the one the engine takes for its size, whatever else runs
(engine/core.py `_move_plan`). `MARGIN` adds a quarter for an operation this count misses
(it was twice the sum while a move was priced on the widest route, not the engine's), under
DeepSpeed and FSDP2 (`margin`). In the generic engine (megatron, or no framework:
`exact_gradients`) nothing is missed, so the planner uses the sum itself (issue 36's eighth
round): every op that engine makes is in it with at least the time it takes alone: the
GPU's forward, backward and recompute and the update (engine/schedule_passes.py,
schedule_resident.py, schedule_shared.py, schedule_optimizer.py `_compute`), the pipeline's
waits (its only ops with a duration and no work: `bubble_s`, `bubble_after_s`), every move
(weights, gradients and activations as often as made, the optimizer's state twice) and
every collective; the ops that are not moves and not counted (DeepSpeed's bucket kernels,
FSDP2's host adds) and the fp32 or flash-swapped gradient paths exist only under those
frameworks. A move's time alone is the engine's own (its latency and fill as one delay, then
one flow across its route's resources at the bottleneck: `_move_plan`, `_flow`); while any
op is under way the sum of what is left of each op's time alone falls at least as fast as
time passes (a stream's op runs at its speed; a saturated link's flows together at least
as fast as one alone); nothing idles (an op waiting on memory waits on an op under way, or
the engine would stop). tests/test_plan_bound.py checks the bound, without the margin, is
never below the simulated period over every shipped scenario and random ones, and over
random plans of the default scenario's space with optimizer state on HBF.
"""

from __future__ import annotations

import math

from tiersim.config.framework import OffloadPlan
from tiersim.engine.durable import MAX_TRAILING_STEPS
from tiersim.engine.param_swap import swapped_in
from tiersim.hardware.topology import Topology
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.placement import homes
from tiersim.state.resolved import Resolved
from tiersim.workload.unit import Unit
from tiersim.workload.work import Workload

MARGIN = 1.25  # the bound the planner uses: the serial sum and a quarter (module docstring)
# the sum grown by this: float round-off never drops it below a period it equals (a step of
# resident compute and blocking collectives only is its serial sum)
ROUND_UP = 1 + 1e-9


class Moves:
    """Moves between tiers, summed by route and size: a move alone takes what the engine gives
    it (engine/core.py `_move_plan`): the quickest route for its size, its latency, the
    pipeline's fill (a chunk over each hop but the last, at the bottleneck) and then its bytes
    at the bottleneck."""

    def __init__(self, topo: Topology, chunk: float):
        self.topo, self.chunk = topo, chunk
        self.by_move: dict[tuple[str, str, float], float] = {}  # (src, dst, bytes) -> moves

    def add(self, src: str, dst: str, nbytes: float, times: int = 1) -> None:
        if src != dst and nbytes > 0:
            key = (src, dst, nbytes)
            self.by_move[key] = self.by_move.get(key, 0) + times

    def seconds(self) -> float:
        """inf where a pair has no route (such a candidate is refused before it is run)."""
        total = 0.0
        for (src, dst, nbytes), count in self.by_move.items():
            route = self.topo.route(src, dst, nbytes)  # the engine's (cached by size)
            if route is None:
                return math.inf
            fill = max(0, len(route.links) - 1) * min(self.chunk, nbytes)
            total += count * (route.latency_s + (fill + nbytes) / route.bottleneck)
        return total


def _comm_s(comm, times: int, capacity: dict) -> float:
    if comm is None or (comm.nbytes <= 0 and comm.latency_s <= 0):
        return 0.0
    cap = capacity.get(comm.resource, math.inf)
    return times * (comm.latency_s + (comm.nbytes / cap if cap > 0 else math.inf))


def tier_bytes(u) -> tuple[float, float]:
    """The bytes of a unit's weights and gradients one move between tiers carries: a unit
    sharded over data parallelism fetches only its home shard (the rest comes by its gather,
    a collective counted on its own) and writes home only the gradients it keeps (the
    reduction is a collective too); an unsharded one moves them whole (engine/
    schedule_passes.py: `fetch_weights`, `write_gradients`). The boundary write of fp32
    gradients moves at most twice the stored bytes: the counts' factor of two covers it."""
    weights = u.homed.get("weights", 0)
    if u.dp_weights is None:
        weights = max(u.weights_full, weights)
    return weights, u.homed.get("gradients", 0)


def alike_runs(units) -> list[tuple[Unit, int]]:
    """The units as runs of copies, each with its length: a unit whose every field but its
    name equals the one before's (workload.work `_renamed`: a run of alike layers) is a copy
    of it, and moves the same."""
    runs: list[list] = []
    for u in units:
        if runs and _copy_of(u, runs[-1][0]):
            runs[-1][1] += 1
        else:
            runs.append([u, 1])
    return [(u, n) for u, n in runs]


def _copy_of(u: Unit, v: Unit) -> bool:
    return {**u.__dict__, "name": None} == {**v.__dict__, "name": None}


def margin(res: Resolved) -> float:
    """The factor the planner applies to the sum: 1 in the generic engine, `MARGIN` under
    DeepSpeed and FSDP2 (module docstring)."""
    return 1.0 if exact_gradients(res.execution.offload) else MARGIN


def serial_step_s(res: Resolved, wl: Workload, topo: Topology, runs=None) -> float:
    """Every operation of one step one after another, each alone (module docstring); `runs`:
    `alike_runs(wl.units)`, where the caller has them (else worked out here)."""
    m, units = wl.micro_batches, wl.units
    machine, placement = res.machine, res.execution.placement
    gpu = machine.gpu.memory
    updater = gpu if placement.optimizer_compute == "gpu" else machine.cpu.memory
    base = homes(placement, machine)
    total = m * sum(u.forward_s + u.backward_s + u.recompute_s for u in units)
    on_gpu = placement.optimizer_compute == "gpu"  # the update runs on one device only
    total += sum(u.optimizer_gpu_s if on_gpu else u.optimizer_cpu_s for u in units)
    total += wl.bubble_s + wl.bubble_after_s
    moves = Moves(topo, res.execution.simulation.chunk_size)
    cap = wl.net_capacity
    runs = alike_runs(units) if runs is None else runs
    for u, n in runs:  # moves counted by the run (whole counts: sums exact)
        home = u.home or base
        weight_moves(moves, res, home["weights"], updater, u, n, m)
        gradient_moves(moves, res, home["gradients"], updater, u, n, m)
        moves.add(gpu, home["activations"], u.activations, n * m)
        moves.add(home["activations"], gpu, u.activations, n * m)
        for cls in ("optimizer", "master"):
            moves.add(home[cls], updater, u.homed.get(cls, 0), n * 2)
            moves.add(updater, home[cls], u.homed.get(cls, 0), n * 2)
        moves.add(gpu, updater, u.gradients_for_update, n * 2)
    for u, n in runs:  # each unit's collectives, added unit by unit in order as before
        terms = _comm_terms(u, m, cap)
        for _ in range(n):
            for term in terms:
                total += term
    return (total + moves.seconds()) * ROUND_UP


def _comm_terms(u: Unit, m: int, cap: dict) -> list[float]:
    """A unit's collectives in a step, each a term of the sum in the order it is added: the
    tensor-, expert- and context-parallel ones of every micro-batch, the weight gathers of
    every forward and backward, the gradient reductions, the updated parameters' gather and
    the embedding's sync. (An alike unit's are the same: worked out once a run.)"""
    terms = [
        _comm_s(comm, m, cap) for comm in (u.tp_forward, u.tp_backward, u.ep_forward, u.ep_backward)
    ]
    terms += [
        _comm_s(comm, m, cap)
        for comm in (u.cp_forward, u.cp_backward, u.cp_forward_hidden, u.cp_backward_hidden)
    ]
    terms += [_comm_s(comm, m, cap) for comm in (u.ep_forward_hidden, u.ep_backward_hidden)]
    terms.append(_comm_s(u.dp_weights, 2 * m + 2, cap) + _comm_s(u.dp_gradients, m + 1, cap))
    terms.append(_comm_s(u.dp_weights_secondary, 2 * m + 2, cap))  # ZeRO++ hpZ's
    terms.append(_comm_s(u.dp_parameters, 2, cap) + _comm_s(u.embedding_sync, 2, cap))
    return terms


def weight_moves(moves: Moves, res: Resolved, home: str, updater: str, u: Unit, n: int, m: int):
    """Every move of `n` alike units' weights in a step, each as often as the schedule makes
    it (engine/schedule_passes.py, schedule_optimizer.py, param_swap.py): fetched for each
    micro-batch's forward and backward (its home shard, or all of it: `tier_bytes`; none
    where still held or kept), through host memory where DeepSpeed's swapper reads them
    (`swapped_in`: from home to host, then to the GPU); for the update, read where no master
    copy is (`_fetch_state`), the updated shard written home (`_write_unit`), and the
    gathered rest written home where they live off the GPU (`_gather_parameters`): `n` x
    (2 `m` + 3) moves at most, each counted once (it was 2 x (2 `m` + 2) fetches); with
    ZeRO++ hpZ's secondary partition off the GPU, each use's write of it home besides."""
    gpu, uses = res.machine.gpu.memory, n * 2 * m  # `m` micro-batches a step
    # ZeRO++ hpZ homed off the GPU: a fetch copies the secondary partition where it is the
    # larger, and each use's release writes it home but for the persistent parameters',
    # written once a step (engine/hpz_offload.py)
    secondary = u.hpz_secondary if u.dp_weights_secondary is not None else 0
    persistent = u.hpz_persistent if secondary else 0
    weights = max(tier_bytes(u)[0], secondary)
    moves.add(gpu, home, secondary - persistent, uses)
    moves.add(gpu, home, persistent, n)
    if swapped_in(res.execution.offload, res.machine, home):
        host = res.machine.cpu.memory
        moves.add(home, host, weights, uses)
        moves.add(host, gpu, weights, uses)
    else:
        moves.add(home, gpu, weights, uses)
    moves.add(home, updater, u.weights_updated, n)
    moves.add(updater, home, u.weights_updated, n)
    moves.add(gpu, home, max(0, u.weights_full - u.weights_updated), n)


def exact_gradients(plan: OffloadPlan) -> bool:
    """Whether a step's gradients move only as tiersim's generic engine moves them (megatron,
    or no framework: config/framework.py): as stored, none through flash with the optimizer
    state, no DeepSpeed kernels or copies on the compute stream, no FSDP2 host adds
    (engine/schedule_offload.py: each of those needs DeepSpeed, FSDP2 or fp32 boundary
    gradients)."""
    return (
        plan.framework not in ("deepspeed", "fsdp")
        and plan.boundary_gradients != "fp32"
        and not plan.swap_gradients
    )


def gradient_moves(moves: Moves, res: Resolved, home: str, updater: str, u: Unit, n: int, m: int):
    """Every move of `n` alike units' gradients homed at `home` in a step of `m` micro-batches.
    In the generic engine (`exact_gradients`), as often as the schedule makes them
    (engine/schedule_passes.py): written home after each backward (`write_gradients`: m),
    read back to accumulate from the second micro-batch on (`accumulation_read`: m - 1), and
    read by the update from home (schedule_offload.py `update_gradients`; one held on the
    GPU is sent to the updater with the other classes' moves). Elsewhere at most m + 1 each
    way, counted twice: the factor covers a framework's fp32 boundary write (twice the
    bytes), its swap through flash, and its work that is not a move (DeepSpeed's bucket
    kernels, FSDP2's host adds: counted exactly, the sum fell under the ZeRO-Offload
    scenarios' periods, docs/plan-scale.md's sixth round)."""
    gpu, gradients = res.machine.gpu.memory, tier_bytes(u)[1]
    if exact_gradients(res.execution.offload):
        moves.add(gpu, home, gradients, n * m)
        moves.add(home, gpu, gradients, n * (m - 1))
        moves.add(home, updater, u.gradients_for_update, n)
        return
    moves.add(gpu, home, gradients, n * 2 * (m + 1))
    moves.add(home, gpu, gradients, n * 2 * (m + 1))


def checkpoint_copy_s(res: Resolved, wl: Workload, topo: Topology, runs=None) -> float:
    """Each checkpointed class's bytes copied to the target alone: from its home directly,
    and through the staging tier (a snapshot, then its drain), all one after another."""
    target = res.execution.checkpoint.target
    staging = res.execution.checkpoint.staging
    base = homes(res.execution.placement, res.machine)
    moves = Moves(topo, res.execution.simulation.chunk_size)
    for u, n in alike_runs(wl.units) if runs is None else runs:
        home = u.home or base
        for cls in CHECKPOINTED:
            nbytes = max(u.homed.get(cls, 0), u.weights_full if cls == "weights" else 0)
            moves.add(home[cls], target, nbytes, n)
            moves.add(home[cls], staging, nbytes, n)
            moves.add(staging, target, nbytes, n)
    return moves.seconds()


def period_upper_s(res: Resolved, wl: Workload, topo: Topology) -> float:
    """The most the step's period can be (module docstring), without `MARGIN`; inf where a
    checkpoint's interval is not known before the run (chosen from its cost)."""
    step = serial_step_s(res, wl, topo)
    return step + checkpoint_share_s(res, wl, topo, step)


def checkpoint_share_s(
    res: Resolved, wl: Workload, topo: Topology, step_s: float, runs=None
) -> float:
    """The most a durable checkpoint adds to each step's period (its stall over the interval:
    module docstring), where a step takes at most `step_s`; 0 without one, inf where its
    interval is not known before the run (chosen from its cost)."""
    if not res.execution.checkpoint_simulated:
        return 0.0
    every = res.execution.checkpoint.every_steps
    if not isinstance(every, int) or isinstance(every, bool):
        return math.inf
    stall = checkpoint_copy_s(res, wl, topo, runs) + (1 + MAX_TRAILING_STEPS) * step_s
    return stall / every
