"""A lower bound on a candidate's step time, from its workload alone (no engine run), so that
`tiersim plan` simulates only the candidates that could still reach the top.

Each term is time the step cannot do without, whatever overlaps with what:
- compute: the GPU's forward, backward and recompute of every unit and micro-batch, one
  after another on its stream;
- the optimizer: the CPU's update of every unit (one CPU optimizer works through the units
  in turn), or the GPU's update of every unit, on the same stream as its compute (added to
  it);
- the exposed update: with the synchronous update, the GPU work that must come before any
  update starts, then the CPU optimizer's work and the state written back to homes off the
  updating device (`_exposed_update_s`);
- each network channel: the bytes the GPU must send on it over its capacity (the
  collectives of every micro-batch, and each unit's gradient reduction and weight gathers
  at least once a step);
- each tier's ports: every byte a step must move out of a tier passes its read port, every
  byte into it its write port, at no more than the port's bandwidth. A step must move at
  least: the weights homed off the GPU, read once a micro-batch (each forward needs them, and
  the engine keeps a unit's weights only into that unit's next use); the activations homed
  off it, written out after each micro-batch's forward; the gradients homed off the GPU,
  written once; the optimizer state and master weights homed off the device
  that updates them, read and written back once; the weights homed off the GPU, their
  updated shard written home once and, where ZeRO-1/2 gathers the update, the gathered rest
  too (`weights_written_home`: they were not counted before issue 36's seventh round, so a
  plan with its weights on flash had a wear floor a third or less of its least). Any
  route, split or staged, starts at the source's read port and ends at the destination's
  write port, so bytes / bandwidth bounds it, however the links between are shared.
The bound is never above the simulated step (tests/test_plan_bound.py: every shipped
scenario, and random ones); `SAFETY` keeps float round-off from making it so.

Wear: the bytes a step must write into a flash tier and its budget's allowance a day give the
least step time at which the budget can hold (`wear_floor`): a plan that holds every budget
is at least that slow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import field

from tiersim.analysis.wear import TOLERANCE, judge, tier_wear
from tiersim.config.schema import Scenario
from tiersim.core.records import record
from tiersim.core.units import DAY_S
from tiersim.state.placement import homes
from tiersim.state.resolved import Resolved
from tiersim.workload.experts import combined_1f1b
from tiersim.workload.pipeline import alone_visits
from tiersim.workload.work import Workload

SAFETY = 1 - 1e-9  # the bound shrunk by this: round-off never lifts it above the step


@record
class StepBound:
    time_s: float  # the step takes at least this long
    binding: str  # the term that sets it: "compute", "optimizer", "<tier> read port", ...
    terms: dict[str, float]  # every term, seconds
    written: dict[str, float] = field(default_factory=dict)  # tier -> least bytes per step

    def tokens_per_s(self, tokens_per_step: int) -> float:
        """The most tokens per second the candidate could reach."""
        return tokens_per_step / self.time_s if self.time_s > 0 else float("inf")


def step_bound(res: Resolved, wl: Workload, runs=None) -> StepBound:
    """The lower bound on the step time of `res` (its workload `wl`): module docstring;
    `runs`: its units as runs of alike units (`plan.upper.alike_runs`), where the caller has
    them (else each unit is a run of one)."""
    m = wl.micro_batches
    compute = m * sum(u.forward_s + u.backward_s + u.recompute_s for u in wl.units)
    compute -= _alone_slowdowns(res, wl, True, True)  # passes alone: unslowed
    on_gpu = res.execution.placement.optimizer_compute == "gpu"
    optimizer = sum(u.optimizer_gpu_s if on_gpu else u.optimizer_cpu_s for u in wl.units)
    compute += wl.bubble_s  # the stream waits on the other pipeline stages as long
    terms = {"compute": compute + optimizer if on_gpu else compute}
    if not on_gpu:
        terms["optimizer"] = optimizer
    ports, written = _port_seconds(res, wl, [(u, 1) for u in wl.units] if runs is None else runs)
    terms.update(ports)
    terms.update(_network_seconds(wl))
    exposed = _exposed_update_s(res, wl)
    if exposed is not None:
        terms["exposed optimizer"] = exposed
    binding = max(terms, key=lambda k: terms[k])
    return StepBound(terms[binding] * SAFETY, binding, terms, written)


def _port_seconds(
    res: Resolved, wl: Workload, runs: list
) -> tuple[dict[str, float], dict[str, float]]:
    """Each tier port's least busy time in a step (the bytes that must pass it over its
    bandwidth), and the least bytes a step writes into each tier. `runs`: (unit, copies):
    the bytes are whole numbers, summed as such (exact, in whatever order), so a run of n
    alike units counts n times its unit's bytes, to the last byte."""
    machine, placement = res.machine, res.execution.placement
    gpu = machine.gpu.memory
    updater = gpu if placement.optimizer_compute == "gpu" else machine.cpu.memory
    base = homes(placement, machine)
    read: dict[str, int] = defaultdict(int)
    written: dict[str, int] = defaultdict(int)

    def move(src: str, dst: str, nbytes: int) -> None:
        if src != dst and nbytes > 0:
            read[src] += nbytes
            written[dst] += nbytes

    m = wl.micro_batches
    for u, n in runs:
        home = u.home or base
        # every micro-batch's forward uses the weights; a unit's use right after its own (the
        # last unit's backward after its forward) keeps them, but no two forwards of a unit
        # follow each other: fetched at least once a micro-batch (engine/schedule_passes.py)
        move(home["weights"], gpu, n * m * u.homed.get("weights", 0))
        move(gpu, home["activations"], n * m * u.activations)  # written out after each forward
        move(gpu, home["gradients"], n * u.homed.get("gradients", 0))
        for cls in ("optimizer", "master"):
            move(home[cls], updater, n * u.homed.get(cls, 0))
            move(updater, home[cls], n * u.homed.get(cls, 0))
        for src, nbytes in weights_written_home(u, gpu, updater):
            move(src, home["weights"], n * nbytes)
    out = {}
    for tier, nbytes in read.items():
        out[f"{tier} read port"] = nbytes / machine.tiers[tier].read_bw
    for tier, nbytes in written.items():
        out[f"{tier} write port"] = nbytes / machine.tiers[tier].write_bw
    return out, {tier: float(nbytes) for tier, nbytes in written.items()}


def weights_written_home(u, gpu: str, updater: str) -> list[tuple[str, int]]:
    """The weight bytes a step's update sends home, and from where (engine/
    schedule_optimizer.py, the only optimizer step): the updated shard from the device that
    updates it (`_write_unit`), and, where the updated weights are all-gathered (ZeRO-1/2's
    `dp_parameters`), the gathered rest from the GPU (`_gather_parameters`). A home on the
    same device moves nothing (`move` skips it)."""
    out = [(updater, u.weights_updated)]
    if u.dp_parameters is not None:
        out.append((gpu, max(0, u.weights_full - u.weights_updated)))
    return out


def _exposed_update_s(res: Resolved, wl: Workload) -> float | None:
    """With the synchronous update, no unit's update starts before its gradients are final,
    after its backward of the last micro-batch, which comes after every micro-batch's
    forward and (without interleaving, where a stage runs its backwards in micro-batch
    order) every other micro-batch's backward and recompute: the GPU has run those first.
    From then on the CPU optimizer updates every unit, and the state each update writes
    back to a home off the device that updates it passes that tier's write port: the step
    lasts at least that start plus the longer of the two. None for the pipelined update."""
    if res.execution.training.optimizer_step != "synchronous":
        return None
    m, units = wl.micro_batches, wl.units
    start = m * sum(u.forward_s for u in units)  # those alone unslowed (experts.py)
    backwards = res.execution.parallel.virtual_pipeline == 1
    if backwards:  # (every alone backward's slowdown off: at most one too many, still below)
        start += (m - 1) * sum(u.backward_s + u.recompute_s for u in units)
    start -= _alone_slowdowns(res, wl, True, backwards)
    machine, placement = res.machine, res.execution.placement
    on_gpu = placement.optimizer_compute == "gpu"
    updater = machine.gpu.memory if on_gpu else machine.cpu.memory
    base = homes(placement, machine)
    back: dict[str, float] = defaultdict(float)
    for u in units:
        home = u.home or base
        for cls in ("optimizer", "master"):
            if home[cls] != updater:
                back[home[cls]] += u.homed.get(cls, 0)
    after = [n / machine.tiers[t].write_bw for t, n in back.items()]
    if not on_gpu:
        after.append(sum(u.optimizer_cpu_s for u in units))
    return start + max(after, default=0.0)


def _alone_slowdowns(res: Resolved, wl: Workload, forwards: bool, backwards: bool) -> float:
    """The SM-share slowdowns a step's passes that run alone under combined 1F1B do not take
    (workload/experts.py `alone_unit`; pipeline.alone_visits counts them), of its forwards
    and or its backwards."""
    if not combined_1f1b(res):
        return 0.0
    visits = alone_visits(wl.chunks, wl.stage, res.execution.parallel.pipeline, wl.micro_batches)
    total = 0.0
    for u, (f, b) in zip(wl.units, visits, strict=True):
        if u.ep_alone is not None:
            total += f * u.ep_alone[2] * forwards + b * u.ep_alone[3] * backwards
    return total


def _network_seconds(wl: Workload) -> dict[str, float]:
    """Each network channel's least busy time in a step: the bytes the GPU must send on it
    over its capacity (collectives on one channel share it). Counted at least: the tensor-
    and expert-parallel collectives of every micro-batch's forward and backward, each unit's
    gradient reduction once a step (every micro-batch where sharded gradients are reduced
    so), its weights gathered once and its updated parameters gathered once."""
    m = wl.micro_batches
    sent: dict[object, float] = defaultdict(float)

    def add(comm, times: int) -> None:
        if comm is not None and comm.nbytes > 0:
            sent[comm.resource] += times * comm.nbytes

    for u in wl.units:
        for comm in (u.tp_forward, u.tp_backward, u.ep_forward, u.ep_backward):
            add(comm, m)
        add(u.dp_gradients, m if wl.gradients_every_microbatch else 1)
        add(u.dp_weights, 1)
        add(u.dp_parameters, 1)
    out = {}
    for resource, nbytes in sent.items():
        capacity = wl.net_capacity.get(resource, math.inf)
        if capacity > 0 and math.isfinite(capacity):
            out[f"network {resource[1]}"] = nbytes / capacity
    return out


def wear_floor(s: Scenario, written: dict[str, float]) -> tuple[float, str | None]:
    """The least step time at which every flash tier's wear budget can hold, and the tier
    that sets it: a step writes at least `written` bytes into each tier (StepBound.written),
    and its budget allows so many host bytes a day (tiersim.analysis.wear.judge: a constant
    of the tier and the budget), so with steps per day = 86,400 / step time (no
    budget.steps_per_day) a step shorter than written x 86,400 / allowed wears it past the
    budget; with budget.steps_per_day given, a step that writes more than allowed / steps
    per day cannot hold at any step time (inf). (0, None) where no budget binds."""
    floor, tier_name = 0.0, None
    for name, budget in s.budget.tiers.items():
        tier, nbytes = s.hardware.tiers.get(name), written.get(name, 0.0)
        if tier is None or tier.endurance is None or nbytes <= 0:
            continue
        wear = tier_wear(name, tier, {"least": nbytes}, 1.0, 1.0)
        allowed = judge(wear, budget, tier.endurance.warranty).allowed_host_bytes_per_day
        least = (1 - TOLERANCE) * nbytes  # within budget at a margin of 1 - TOLERANCE
        if s.budget.steps_per_day is not None:
            t = math.inf if least * s.budget.steps_per_day > allowed else 0.0
        else:
            t = least * DAY_S / allowed if allowed > 0 else math.inf
        if t > floor:
            floor, tier_name = t, name
    return floor * SAFETY, tier_name
