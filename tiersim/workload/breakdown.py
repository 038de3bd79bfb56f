"""Where the simulated stage's step time goes, as the model prices it (per GPU, per step).

- `gemm_s`: matrix multiplies (forward, backward, recompute; the embedding and head too);
- `memory_bound_s`: the elementwise kernels between them (norms, softmax, dropout,
  activations, residuals, cross-entropy); a model the kernels do not time (MoE, latent
  attention, one known by its parameter count: tiersim.workload.stage_times) splits as it is
  priced, its FLOPs at peak x efficiency as GEMM, its activation bytes at HBM bandwidth as
  memory-bound;
- `framework_s`: what `parallel.pipeline_engine_overhead` adds to those;
- `collectives_s`: collectives that block the GPU stream (tensor-parallel ones, the pipeline's
  point-to-point exchanges, data-parallel gradients with `overlap_gradient_reduce: false`,
  the tied-embedding sync), each at its time alone, plus the slowdown hidden tensor-parallel
  collectives cause (`gpu.collective_sm_share`);
- `bubble_s`: the pipeline's fill and drain with every stage like this one, (p - 1) x one
  micro-batch's forward and backward through a chunk;
- `imbalance_s`: the rest of the pipeline wait: stages heavier than this one (the first
  stage's embedding, the last stage's output head and loss).
The engine's own figures (`exposed_transfer_s`, `pipeline_bubble_s`) are what the simulation
saw; these are the model's prices, from which they result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.core.records import record
from tiersim.state.inventory import stage_layers
from tiersim.workload import kernels
from tiersim.workload.comms import alone_s, capacities
from tiersim.workload.stage_times import alone_visits_of, flop_timed_kernels

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


@record
class StepBreakdown:
    gemm_s: float
    memory_bound_s: float
    framework_s: float
    collectives_s: float
    bubble_s: float
    imbalance_s: float

    def as_dict(self) -> dict[str, float]:
        return dict(vars(self))


def _flop_timed_totals(r: Resolved, model, stage: int) -> tuple[float, float]:
    """(GEMM, memory-bound) seconds of one micro-batch through the stage's layers and rest,
    each as `flop_timed_kernels` prices it: FLOPs at peak x efficiency, activation bytes at
    HBM bandwidth x memory efficiency."""
    par = r.execution.parallel
    first, last = stage == 0, stage == par.pipeline - 1
    runs = [
        (run.shape, True, run.count)
        for run in stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    ]
    gemm = memory = 0.0
    for shape, is_layer, count in [*runs, (model, False, 1)]:
        f, b, c = flop_timed_kernels(r, shape, is_layer, last, first)
        unit_gemm = f.gemm_s + b.gemm_s + c.gemm_s
        unit_memory = f.memory_s + b.memory_s + c.memory_s
        for _ in range(count):  # unit by unit, as the step sums them (the same rounding)
            gemm, memory = gemm + unit_gemm, memory + unit_memory
    return gemm, memory


def _kernel_totals(r: Resolved, model, units, stage: int) -> tuple[float, float]:
    """(GEMM, memory-bound) seconds of one micro-batch through the stage's units."""
    if not kernels.kernel_timed(model):  # no shapes, or none the kernels know
        return _flop_timed_totals(r, model, stage)
    par = r.execution.parallel
    first, last = stage == 0, stage == par.pipeline - 1
    runs = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    indices = [u.first + i for u in runs for i in range(u.count)]
    per_kind: dict = {}  # layers differ only by their window here
    gemm = memory = 0.0
    for i in [*indices, None]:  # summed unit by unit, in order, the rest unit last
        key = None if i is None else model.is_sliding(i)
        if key not in per_kind:
            is_layer = i is not None
            per_kind[key] = kernels.unit_kernels(r, model, is_layer, first, last, i or 0)
        for k in per_kind[key]:
            gemm, memory = gemm + k.gemm_s, memory + k.memory_s
    return gemm, memory


def _blocking_s(r: Resolved, units, dp_per_microbatch: bool, cap: dict | None) -> float:
    """The step's blocking collectives over the stage's units, each at its time alone
    (`cap`: `capacities(r)`, where the caller has it)."""
    m, cap = r.execution.training.grad_accumulation, capacities(r) if cap is None else cap
    total = m * sum(alone_s(r, u.tp_forward, cap) + alone_s(r, u.tp_backward, cap) for u in units)
    total += m * sum(alone_s(r, u.ep_forward, cap) + alone_s(r, u.ep_backward, cap) for u in units)
    total += m * sum(alone_s(r, u.cp_forward, cap) + alone_s(r, u.cp_backward, cap) for u in units)
    for u in units:
        if not r.execution.parallel.overlap_gradient_reduce:
            total += alone_s(r, u.dp_gradients, cap) * (m if dp_per_microbatch else 1)
        total += alone_s(r, u.embedding_sync, cap)
    return total


def _alone_s(r: Resolved, units, alone: list | None, cap: dict | None) -> tuple[float, float]:
    """What a step's passes that run alone under combined 1F1B (`alone`: each unit's alone
    forwards and backwards, pipeline.alone_visits; None: none) change against the paired
    shape every pass is priced at: (their blocking all-to-alls' seconds more, their
    SM-share slowdowns' seconds less) (workload/experts.py `alone_unit`)."""
    if alone is None:
        return 0.0, 0.0
    cap = capacities(r) if cap is None else cap
    more = less = 0.0
    for u, (f, b) in zip(units, alone, strict=True):
        if u.ep_alone is None:
            continue
        fwd, bwd, slow_f, slow_b = u.ep_alone
        more += f * (alone_s(r, fwd, cap) - alone_s(r, u.ep_forward, cap))
        more += b * (alone_s(r, bwd, cap) - alone_s(r, u.ep_backward, cap))
        less += f * slow_f + b * slow_b
    return more, less


def step_breakdown(
    r: Resolved,
    model,
    units,
    stage: int,
    pipeline_idle: tuple[float, float, float],
    dp_per_microbatch: bool,
    cap: dict | None = None,
) -> StepBreakdown:
    """`pipeline_idle`: (the stage's pipeline idle time, the uniform fill and drain within
    it, one micro-batch's point-to-point time on this stage); `cap`: `capacities(r)`, where
    the caller has it (else worked out here)."""
    m = r.execution.training.grad_accumulation
    gemm, memory = _kernel_totals(r, model, units, stage)
    scale = kernels.overhead(r)  # kernel- or FLOP-timed, compute_times applies it
    more, less = _alone_s(r, units, alone_visits_of(r, stage, len(units) - 1), cap)
    compute = m * sum(u.forward_s + u.backward_s + u.recompute_s for u in units) - less
    sm_share = compute - m * scale * (gemm + memory)
    # the two sums add the same kernels in different orders: a difference within their
    # rounding (relative 1e-9, far below any real share) is no time at all
    sm_share = sm_share if sm_share > 1e-9 * compute else 0.0
    idle, fill, p2p = pipeline_idle
    blocking = _blocking_s(r, units, dp_per_microbatch, cap) + more + m * p2p + sm_share
    return StepBreakdown(
        gemm_s=m * gemm,
        memory_bound_s=m * memory,
        framework_s=m * (scale - 1.0) * (gemm + memory),
        collectives_s=blocking,
        bubble_s=fill,
        imbalance_s=max(0.0, idle - fill - m * p2p),
    )
