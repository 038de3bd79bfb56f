"""The work of one training step on one GPU, unit by unit: bytes per class and compute times.

A unit is one transformer layer of the simulated pipeline stage, or the stage's 'rest'
(embeddings, final norm, output head). Every figure is per GPU, after tensor division and
data-parallel sharding, so the engine only schedules and times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tiersim.inventory import (
    build_inventory,
    layer_activation_bytes,
    master_bytes,
    optimizer_values,
    sharded_classes,
    unit_matrices,
)
from tiersim.model import Transformer, build_model
from tiersim.schema import PRECISION_BYTES, Scenario


@dataclass(frozen=True)
class Unit:
    name: str
    params: int  # parameters this GPU holds for the unit (after tensor division)
    weights_full: int  # bytes compute needs in HBM
    weights_home: int  # bytes homed per GPU (a shard under ZeRO-3)
    gradients_full: int  # bytes backward produces
    gradients_home: int
    master_home: int
    optimizer_home: int
    gradients_for_update: int  # gradient bytes the optimizer reads (its shard)
    weights_updated: int  # weight bytes the optimizer produces (its shard)
    activations: int  # bytes retained per micro-batch
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_gpu_s: float
    optimizer_cpu_s: float


@dataclass(frozen=True)
class Workload:
    units: tuple[Unit, ...]
    micro_batches: int
    tokens_per_step: int  # over the whole data-parallel job
    hbm_resident: int  # bytes homed in GPU memory for the whole step (not activations)
    stage: int


def _gpu_rate(s: Scenario) -> float:
    peak = s.hardware.gpu.peak_flops[s.training.precision.weights]
    return peak * s.hardware.gpu.efficiency


def _compute_times(s: Scenario, model, is_layer: bool, last_stage: bool) -> tuple[float, ...]:
    """Forward, backward and recompute seconds of one unit for one micro-batch."""
    seq, mbs, t, rate = s.seq_len, s.training.micro_batch_size, s.parallel.tensor, _gpu_rate(s)
    if not is_layer:
        fwd = model.head_forward_flops(seq, mbs) / t / rate if last_stage else 0.0
        return fwd, 2.0 * fwd, 0.0
    fwd = model.layer_forward_flops(seq, mbs) / t / rate
    recompute = {"none": 0.0, "full": fwd}.get(s.training.recompute)
    if recompute is None:  # selective: QK^T, softmax, dropout and attention over V again
        heads_dim = model.heads * model.head_dim if isinstance(model, Transformer) else 0
        recompute = 4.0 * mbs * seq * seq * heads_dim / t / rate
    return fwd, 2.0 * fwd, recompute


def _optimizer_times(s: Scenario, touched: float, updated_params: float) -> tuple[float, float]:
    """GPU: bound by HBM bandwidth over the bytes touched. CPU: parameter rate or host memory
    bandwidth, whichever binds."""
    hw = s.hardware
    hbm = hw.tiers[hw.gpu.memory]
    gpu_s = touched / (min(hbm.read_bw, hbm.write_bw) * hw.gpu.optimizer_efficiency)
    host_bw = hw.cpu.memory_bandwidth or hw.tiers[hw.cpu.memory].read_bw
    cpu_s = max(updated_params / hw.cpu.optimizer_rate, touched / host_bw)
    return gpu_s, cpu_s


def _unit(s: Scenario, model, name: str, mats, is_layer: bool, last: bool, acts: int) -> Unit:
    prec, d = s.training.precision, s.parallel.data
    shard = sharded_classes(s)
    params = sum(m.size for m in mats)

    def home(raw: int, cls: str) -> int:
        return math.ceil(raw / d) if shard[cls] else raw

    w_full = params * PRECISION_BYTES[prec.weights]
    g_full = params * PRECISION_BYTES[prec.gradients]
    updated = params / d if shard["optimizer"] else float(params)
    master = home(params * master_bytes(s), "master")
    opt = home(
        optimizer_values(s.training.optimizer, mats) * PRECISION_BYTES[prec.optimizer], "optimizer"
    )
    g_update = math.ceil(updated * PRECISION_BYTES[prec.gradients])
    w_updated = math.ceil(updated * PRECISION_BYTES[prec.weights])
    weights_read = 0 if master_bytes(s) else w_updated  # no master: update weights in place
    touched = g_update + 2 * master + 2 * opt + w_updated + weights_read
    gpu_opt, cpu_opt = _optimizer_times(s, touched, updated)
    fwd, bwd, rec = _compute_times(s, model, is_layer, last)
    return Unit(
        name,
        params,
        w_full,
        home(w_full, "weights"),
        g_full,
        home(g_full, "gradients"),
        master,
        opt,
        g_update,
        w_updated,
        acts if is_layer else 0,
        fwd,
        bwd,
        rec,
        gpu_opt if params else 0.0,
        cpu_opt if params else 0.0,
    )


def build_workload(s: Scenario) -> Workload:
    model = build_model(s.model)
    inv = build_inventory(s)
    par = s.parallel
    groups = unit_matrices(model, inv.stage, par.pipeline, par.tensor)
    last = inv.stage == par.pipeline - 1
    acts = math.ceil(layer_activation_bytes(s, model))
    first = inv.stage * (model.layers // par.pipeline)
    units = [
        _unit(s, model, f"L{first + i}", mats, True, last, acts)
        for i, mats in enumerate(groups[:-1])
    ]
    units.append(_unit(s, model, "rest", groups[-1], False, last, 0))
    gpu = s.hardware.gpu.memory
    resident = sum(
        b
        for cls, b in inv.per_gpu.as_dict().items()
        if cls not in ("activations", "total") and _home(s, cls) == gpu
    )
    tokens = s.seq_len * s.training.micro_batch_size * s.training.grad_accumulation * par.data
    return Workload(tuple(units), s.training.grad_accumulation, tokens, resident, inv.stage)


def _home(s: Scenario, cls: str) -> str:
    return s.hardware.gpu.memory if cls == "workspace" else getattr(s.placement, cls)
