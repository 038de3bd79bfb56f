"""The host's memory timeline of one training step (state/timeline.py's Timeline, for host
DRAM): what one GPU's rank holds in host memory, in order, and its node's total (host memory
is shared by the node's GPUs). Built from the same facts the engine schedules with (the
workload's units, the offload plan, the checkpoint's shares), so its peak is the engine's
DRAM occupancy peak where they count the same things (docs/memory.md, "Host memory").

In order:
1. start: the classes homed in host memory (the inventory's: ZeRO-Offload's fp32 master,
   moments and gradients, FSDP2's CPU-offloaded shards, offloaded weights); what pinning them
   adds (PyTorch's caching host allocator rounds each pinned block to a power of two); the
   pinned buffers of the offload engine: ZeRO-Offload's host gradient buffer, DeepSpeed's
   optimizer and parameter swap buffers for state on NVMe or HBF (workload/pinned.py, sizes
   from DeepSpeed's defaults: offload_optimizer.buffer_count 4 x sub_group_size 1e9 fp32
   values, offload_param.buffer_count 5 x buffer_size 1e8 values); a delayed update's second
   gradient buffer; an async checkpoint's staged copy (held from its snapshot until durable,
   as DCP's async_save keeps its staged state dict: the timeline is that of a step while a
   checkpoint drains); a checkpoint kept on the host (two versions while one is written); the
   offloaded activations of the other micro-batches in flight.
2. forward, unit by unit: the unit's activations offloaded to the host (activation
   checkpoints on the CPU), held until its backward fetches them; DeepSpeed ZeRO++ hpZ's
   secondary partition under offload_param, made as the step's first forward releases each
   unit (held from the start where this micro-batch is a later one: state/zeropp.py).
3. backward, in reverse: the fetched activations freed; at the accumulation boundary
   DeepSpeed's CPU optimizer's fp32 gradients (twice a 16-bit gradient's bytes: the extra held
   until the update, or until swapped out to flash).
4. optimizer: a PyTorch optimizer on the CPU (FSDP2's CPUOffloadPolicy) its step's
   temporaries (torch.optim's single-tensor path on CPU tensors: state/single_tensor_adam.py);
   DeepSpeed's CPU-Adam updates in place; then the fp32 gradients freed; then `_post_step`
   frees hpZ's secondary partition.
"""

from __future__ import annotations

import math
import re

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.engine.phases import Context
from tiersim.engine.schedule_checkpoint import share
from tiersim.engine.schedule_offload import fp32_boundary, swapped
from tiersim.engine.schedule_optimizer import update_tiles
from tiersim.engine.simulate import prepare
from tiersim.state.classes import CHECKPOINTED, OPTIMIZER_KEPT
from tiersim.state.host_timeline import HostTimeline, evaluate_host
from tiersim.state.inventory import Inventory, rank_matrices
from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import as_held, held_gradient_precision, master_bytes
from tiersim.state.step_optimizer import update_values, weight_shards
from tiersim.state.timeline import Event
from tiersim.state.timeline_size import check_timeline_size
from tiersim.state.zeropp import SecondaryEvents
from tiersim.workload.pinned import (
    delayed_update_bytes,
    host_gradient_buffer_bytes,
    optimizer_swap_buffer_bytes,
    parameter_swap_buffer_bytes,
    rounding_bytes,
)
from tiersim.workload.work import Workload, build_workload

ROUNDING = "pinned rounding (power-of-two blocks)"
GRADIENT_BUFFER = "host gradient buffer (ZeRO-Offload, pinned)"
OPTIMIZER_SWAP = "optimizer swap buffers (pinned)"
PARAMETER_SWAP = "parameter swap buffers (pinned)"
SECOND_GRADIENTS = "second gradient buffer (delayed update)"
STAGED = "checkpoint staging copy (until durable)"
KEPT = "checkpoint kept on the host (two versions while writing)"
OTHER_ACTIVATIONS = "offloaded activations (other micro-batches)"
ACTIVATIONS = "offloaded activations"
# the part is what the fp32 copy adds to the 16-bit gradients counted beside it (review (k):
# "fp32 gradients 8.82 GB" read as a 4.41e9-value shard's fp32 copy, which is 17.64 GB)
FP32_GRADIENTS = "fp32 gradients beyond the 16-bit ones (accumulation boundary)"
TEMPORARIES = "CPU optimizer step temporaries"
UPDATE_STATE = "state brought in for the CPU update"
START, OPT = "start of the step", "optimizer step"
FP32 = 4


def _stored(c: Context) -> int:
    """The gradients' bytes a value as held to the update (FSDP2: the parameters' dtype)."""
    return PRECISION_BYTES[held_gradient_precision(c.res.execution.training)]


class _Steps:
    """Events as they are added; a zero-byte allocation is no event."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.held: dict[str, int] = {}

    def alloc(self, moment: str, phase: str, key: str, part: str, nbytes: float) -> None:
        n = math.ceil(nbytes)
        if n > 0:
            self.events.append(Event(moment, phase, key, part, n, True))
            self.held[key] = n

    def free(self, moment: str, phase: str, key: str, part: str) -> None:
        n = self.held.pop(key, 0)
        if n:
            self.events.append(Event(moment, phase, key, part, n, False))


def _checkpoint(steps: _Steps, c: Context) -> None:
    """An async checkpoint's staged copy (the classes not homed in the staging tier) and a
    checkpoint kept on the host, as the engine holds them (engine/schedule_checkpoint.py)."""
    res, host = c.res, c.res.machine.cpu.memory
    ck = res.execution.checkpoint
    if not res.execution.checkpoint_simulated:
        return
    units = range(len(c.wl.units))
    if ck.mode == "async" and ck.staging == host:
        staged = sum(
            share(res, c.wl.units[u], cls)
            for u in units
            for cls in CHECKPOINTED
            if c.home_of(u)[cls] != host
        )
        steps.alloc(START, "start", "staged", STAGED, staged)
    if ck.target == host:
        kept = sum(share(res, c.wl.units[u], cls) for u in units for cls in CHECKPOINTED)
        steps.alloc(START, "start", "kept", KEPT, 2 * kept)


def _start(steps: _Steps, c: Context, inv: Inventory, hpz: SecondaryEvents) -> None:
    res, plan, host = c.res, c.plan, c.res.machine.cpu.memory
    use = inv.tiers[host]
    for cls, nbytes in use.classes.items():  # hpZ's secondary partition as its own events
        if cls != "activations":
            nbytes -= hpz.total if cls == "weights" else 0
            steps.alloc(START, "start", cls, f"resident {cls}", nbytes)
    hpz.at_start(steps, START)
    steps.alloc(START, "start", "rounding", ROUNDING, rounding_bytes(res, plan, inv))
    steps.alloc(
        START, "start", "grad buffer", GRADIENT_BUFFER, host_gradient_buffer_bytes(res, plan, inv)
    )
    steps.alloc(
        START, "start", "opt swap", OPTIMIZER_SWAP, optimizer_swap_buffer_bytes(res, plan, c.wl)
    )
    steps.alloc(
        START, "start", "param swap", PARAMETER_SWAP, parameter_swap_buffer_bytes(res, plan)
    )
    second = delayed_update_bytes(res.execution, res.machine, c.wl).get(host, 0)
    steps.alloc(START, "start", "second", SECOND_GRADIENTS, second)
    _checkpoint(steps, c)
    this_mb = sum(_offloaded(c, u) for u in range(len(c.wl.units)))
    other = max(0, use.classes.get("activations", 0) - this_mb)
    steps.alloc(START, "start", "other acts", OTHER_ACTIVATIONS, other)


def unit_label(name: str) -> str:
    """A unit's name as the GPU's timeline says its moments: L12 "layer 12", L127.0 "layer
    127, part 0" (DeepSpeed's tiles of one layer), L3.experts "layer 3's experts", rest
    "embeddings and head" (the stage's units outside the layers, tiersim.workload.work)."""
    if name == "rest":
        return "embeddings and head"
    match = re.fullmatch(r"L(\d+)(?:\.(\w+))?", name)
    if match is None:
        return name
    layer, part = match.groups()
    if part is None:
        return f"layer {layer}"
    return f"layer {layer}'s experts" if part == "experts" else f"layer {layer}, part {part}"


def _offloaded(c: Context, u: int) -> int:
    """Unit u's activations of one micro-batch held in host memory."""
    unit = c.wl.units[u]
    return unit.activations if c.home_of(u)["activations"] == c.res.machine.cpu.memory else 0


def _passes(steps: _Steps, c: Context, hpz: SecondaryEvents) -> None:
    """The last micro-batch's forward and backward: offloaded activations, hpZ's secondary
    partition made where this is the step's first forward, fp32 gradients."""
    host = c.res.machine.cpu.memory
    for u, unit in enumerate(c.wl.units):
        at = f"forward: {unit_label(unit.name)}"
        steps.alloc(at, "forward", f"acts {u}", ACTIVATIONS, _offloaded(c, u))
        hpz.made(steps, at, u)
    for u in reversed(range(len(c.wl.units))):
        unit, at = c.wl.units[u], f"backward: {unit_label(c.wl.units[u].name)}"
        steps.free(at, "backward", f"acts {u}", ACTIVATIONS)
        if fp32_boundary(c, u) and c.home_of(u)["gradients"] == host:
            stored = unit.homed["gradients"]
            extra = stored * FP32 // _stored(c) - stored  # beyond the stored gradient
            steps.alloc(at, "backward", f"fp32 {u}", FP32_GRADIENTS, extra)
            if swapped(c, u):  # on to the flash tier with the optimizer state, then freed
                steps.free(f"{at} (swapped out)", "backward", f"fp32 {u}", FP32_GRADIENTS)


def cpu_optimizer_temporaries(res: Resolved, stage: int) -> int:
    """What a PyTorch optimizer stepping on the CPU allocates beside the state: torch.optim's
    single-tensor path on CPU tensors (its foreach path is for CUDA), one tensor's temporaries
    at a time; none for DeepSpeed's CPU-Adam (in place, C++) or with a master copy (a fused
    update in place, as on the GPU: state/step_optimizer.py)."""
    tr = res.execution.training
    if res.execution.placement.optimizer_compute != "cpu":
        return 0
    if res.execution.offload.framework == "deepspeed" or master_bytes(tr.precision):
        return 0
    values, largest, _ = update_values(res, stage)
    mats = as_held(tr, [m for unit in rank_matrices(res, stage) for m in unit if m.count])
    value_bytes = PRECISION_BYTES[tr.precision.optimizer]
    opt = optimizer(tr.optimizer)  # FSDP2's DTensors stepped a local shard at a time
    return opt.step_temporary_bytes(values, largest, value_bytes, "cpu", mats, weight_shards(res))


def _update_depth(c: Context) -> int:
    """Tiles of the update in flight beside the one computing, as the engine's optimizer step
    keeps them (engine/schedule_optimizer.py, OptimizerStep's depth)."""
    plan = c.plan
    if plan.pipeline_read and plan.pipeline_write and plan.framework != "deepspeed":
        return c.depth
    return 1 if plan.pipeline_read or plan.pipeline_write else 0


def _staged_for_update(c: Context, u: int) -> int:
    """Bytes of unit u the update brings into host memory when the optimizer runs there: its
    gradients, master weights and moments from where they live (and the weights it updates,
    without a master copy). DeepSpeed swaps state on flash into its pinned swap buffers,
    already counted: nothing more."""
    host, unit, home = c.res.machine.cpu.memory, c.wl.units[u], c.home_of(u)
    if c.opt_at != host:
        return 0
    if (
        c.plan.framework == "deepspeed"
        and c.res.machine.tiers[home["optimizer"]].behaviour.swapped_in_blocks
    ):
        return 0
    nbytes = sum(unit.homed[cls] for cls in OPTIMIZER_KEPT if home[cls] != host)
    if home["gradients"] != host:
        nbytes += unit.gradients_for_update
    if unit.homed["master"] == 0 and home["weights"] != host:
        nbytes += unit.weights_updated
    return nbytes


def _optimizer(steps: _Steps, c: Context, stage: int) -> None:
    """The update tile by tile (engine/schedule_optimizer.py update_tiles), `depth` + 1 tiles'
    state in flight at most; a PyTorch optimizer's temporaries; the fp32 gradients freed."""
    tiles = update_tiles(c.res.execution, list(c.wl.units))
    depth = _update_depth(c)
    names = [", ".join(unit_label(c.wl.units[u].name) for u in tile) for tile in tiles]
    for k, tile in enumerate(tiles):
        staged = sum(_staged_for_update(c, u) for u in tile)
        steps.alloc(f"{OPT}: fetch {names[k]}", "optimizer", f"tile {k}", UPDATE_STATE, staged)
        if k >= depth:
            done = f"{OPT}: update {names[k - depth]}"
            steps.free(done, "optimizer", f"tile {k - depth}", UPDATE_STATE)
    for k in range(max(0, len(tiles) - depth), len(tiles)):
        steps.free(f"{OPT}: update {names[k]}", "optimizer", f"tile {k}", UPDATE_STATE)
    temps = cpu_optimizer_temporaries(c.res, stage)
    steps.alloc(OPT, "optimizer", "temps", TEMPORARIES, temps)
    steps.free(OPT, "optimizer", "temps", TEMPORARIES)
    for u in range(len(c.wl.units)):
        steps.free(OPT, "optimizer", f"fp32 {u}", FP32_GRADIENTS)


def host_events(res: Resolved, inv: Inventory, wl: Workload, depth: int) -> list[Event]:
    """One GPU's rank's allocations and frees in host memory over the step (the module's
    docstring says which); `wl`, `depth`: the run's workload and prefetch depth."""
    c = Context.of(res, wl, depth)
    steps = _Steps()
    whole = [u.hpz_secondary for u in wl.units]  # ZeRO++ hpZ's, under offload_param
    hpz = SecondaryEvents(res, res.machine.cpu.memory, whole, [u.hpz_persistent for u in wl.units])
    _start(steps, c, inv, hpz)
    _passes(steps, c, hpz)
    hpz.around_update(steps, lambda: _optimizer(steps, c, inv.stage))
    return steps.events


def host_timeline(res: Resolved, inv: Inventory, depth: int | None = None) -> HostTimeline | None:
    """The host's timeline of the step and its node's GPUs; None where the step puts nothing
    in host memory, or where the engine refuses the run (its message says why). `depth`: the
    simulated run's prefetch depth (StepResult.prefetch_depth), where there is one; else the
    run's set-up works it out (engine/simulate.py prepare), as the engine would."""
    host = res.machine.cpu.memory
    if host not in inv.tiers:  # a machine without a host tier of its own
        return None
    check_timeline_size(res)  # before the workload is built, a unit a layer
    if depth is None:
        try:
            setup = prepare(res, inv)
        except (InputError, InfeasibleError):
            return None
        wl, depth = setup.wl, setup.depth
    else:
        wl = build_workload(res, inv)
    events = host_events(res, inv, wl, depth)
    if not events:
        return None
    timeline = evaluate_host(host, res.machine.tiers[host].capacity, events)
    mesh = Mesh.of(res.execution.parallel)
    per_node = res.machine.network.gpus_per_node
    pipeline = mesh.group("pipeline")  # a node holds stages its stride apart
    stages = min(pipeline.size, max(1, -(-per_node // pipeline.stride)))
    return HostTimeline(timeline, min(per_node, mesh.world), stages, per_node)
