"""One unit's compute times and the pipeline's schedule around the simulated stage: forward,
backward and recompute seconds of a unit for one micro-batch, each stage's chunk times (from
its own layers where the model's differ), the bubble and the chunks of interleaving.
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import add
from typing import TYPE_CHECKING

from tiersim.hardware.kernel_tables import kernel_table
from tiersim.state.activation_policy import core_recomputed, separate_norms
from tiersim.state.activations import MEGATRON
from tiersim.state.layer_sac import checkpointed_share
from tiersim.state.model import LayerView, Transformer
from tiersim.workload import kernels, pipeline
from tiersim.workload.comms import Comm, hidden_s, rest_tensor_comms
from tiersim.workload.experts import alone_unit, combined_1f1b, routed_flops_share
from tiersim.workload.kernels import Kernels
from tiersim.workload.moe_kernels import busiest_rank_slowdown, moe_bytes, moe_shape
from tiersim.workload.pipeline_alone import evaluate_alone
from tiersim.workload.pipeline_p2p import op_costs
from tiersim.workload.pipeline_steady import evaluate_steady

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def flop_rate(r: Resolved) -> float:
    """FLOP/s of a unit timed by its FLOPs: the kernel table's best measured GEMM where the
    GPU has one (tiersim/hardware/kernel_tables.py), else peak x `gpu.efficiency`."""
    gpu, dtype = r.machine.gpu, r.execution.training.precision.compute_precision
    if gpu.kernels is not None:
        best = kernel_table(gpu.kernels).best_rate(dtype)
        if best is not None:
            return best
    return gpu.peak_flops[dtype] * gpu.efficiency


def _memory_bound_s(r: Resolved, bytes_moved: float) -> float:
    """Elementwise kernels' seconds: they reach `gpu.memory_efficiency` of HBM bandwidth
    whichever way their bytes are counted (as `tiersim.workload.kernels` charges them)."""
    gpu = r.machine.gpu
    hbm = r.machine.tiers[gpu.memory]
    return bytes_moved / (min(hbm.read_bw, hbm.write_bw) * gpu.memory_efficiency)


# The attention a layer timed by its FLOPs is charged as, whatever training.attention_kernel
# says: the bytes Megatron-LM's eager attention keeps (its s×s scores among them) go through HBM,
# and selective recompute reruns QK^T, softmax and AV (tiersim.runner's notes say so). Its
# elements are 16-bit (compute_bytes 2) whatever the compute precision, as the kernel-timed
# path's memory-bound bytes are (Megatron-LM's fused fp16/bf16 kernels' constants).
FLOP_TIMED_ACCOUNTING = MEGATRON
FLOP_TIMED_KERNEL = FLOP_TIMED_ACCOUNTING.kernel


def compute_times(
    r: Resolved, model, is_layer: bool, last_stage: bool, first_stage: bool = False
) -> tuple[float, ...]:
    """Forward, backward and recompute seconds of one unit for one micro-batch.

    A transformer's kernels are timed one by one (`tiersim.workload.kernels`); the others by
    their FLOPs and bytes (`flop_timed_kernels`); both x (1 + pipeline_engine_overhead).
    """
    whole, index = (model.model, model.index) if isinstance(model, LayerView) else (model, 0)
    # a LayerView of one: a layer of a model whose windows differ by layer
    if kernels.kernel_timed(whole):
        return kernels.unit_times(r, whole, is_layer, first_stage, last_stage, index)
    # the framework's pipeline engine slows these kernels as it does the kernel-timed ones
    scale = kernels.overhead(r)
    kernels_ = flop_timed_kernels(r, model, is_layer, last_stage, first_stage)
    return tuple(scale * k.total_s for k in kernels_)


def flop_timed_kernels(
    r: Resolved, model, is_layer: bool, last_stage: bool, first_stage: bool = False
) -> tuple[Kernels, Kernels, Kernels]:
    """Forward, backward and recompute of one unit for one micro-batch, timed by its FLOPs and
    bytes: a model known only by its parameter count, and layers the kernel model does not
    know yet (MoE, latent attention; a `LayerView` of a model whose layers differ).

    GEMM part: its FLOPs at peak x efficiency. Memory-bound part: each activation byte a layer
    keeps (16-bit) moved once in forward and twice in backward at HBM bandwidth (min of read
    and write) x `gpu.memory_efficiency`. Full recompute reruns the forward; selective reruns
    QK^T and PV (FLOPs) and softmax, mask and dropout (5 B per score). A transformer's rest
    (embedding, final norm, logits, cross-entropy) is a dense model's: kernel by kernel. The
    kernels alone: `compute_times` adds `parallel.pipeline_engine_overhead`.
    """
    if not is_layer and isinstance(model, Transformer):
        return kernels.unit_kernels(r, model, False, first_stage, last_stage)
    ex = r.execution
    seq, mbs, t, rate = ex.seq_len, ex.training.micro_batch_size, ex.parallel.tensor, flop_rate(r)
    cp = ex.parallel.context  # a context rank's share: 1/c of every term (workload/context.py)
    if not is_layer:
        fwd = model.head_forward_flops(seq, mbs) / t / cp / rate if last_stage else 0.0
        return Kernels(fwd), Kernels(2.0 * fwd), Kernels()
    sequence = r.execution.parallel.sequence
    kept = model.layer_activation_bytes(seq, mbs, t, sequence, "none", FLOP_TIMED_ACCOUNTING) / cp
    elementwise = _memory_bound_s(r, kept)
    # the routed experts' grouped GEMMs at the kernel table's share of the dense rate
    rate /= grouped_slowdown(r, model)
    moe_f, moe_b = moe_block_s(r, model)
    # the same expressions, in the same order, as the step time has always summed them
    forward = Kernels(model.layer_forward_flops(seq, mbs) / t / cp / rate, elementwise + moe_f)
    recompute = Kernels()
    if r.execution.training.recompute == "full":  # 1/N of the layers with recompute_every N
        recompute = forward.on_share(checkpointed_share(r.accounting.recompute_every))
    if r.execution.training.recompute == "selective" and isinstance(model, Transformer | LayerView):
        if core_recomputed(r.accounting):  # the core where its checkpoint holds it
            scores = 5.0 * model.attention_heads * seq * seq * mbs / t / cp  # softmax, mask, drop
            recompute = Kernels(
                4.0 * mbs * seq * seq * model.attention_width / t / cp / rate,
                _memory_bound_s(r, scores),
            )
        if r.accounting.recompute_modules:
            recompute = module_recompute(r, model, recompute, t * cp, rate)
    backward = Kernels(
        2.0 * model.layer_forward_flops(seq, mbs) / t / cp / rate, 2.0 * elementwise + moe_b
    )
    return forward, backward, recompute


def _moe_view(model) -> LayerView | None:
    """The layer as a `LayerView` where it is an MoE layer (a run of alike layers is the
    model itself, as its first layer), else None."""
    view = LayerView(model, 0) if isinstance(model, Transformer) else model
    if not isinstance(view, LayerView) or not view.model.is_moe(view.index):
        return None
    return view


def moe_block_s(r: Resolved, model) -> tuple[float, float]:
    """Forward and backward seconds of an MoE layer's router, token permutation and
    re-sorting (tiersim/workload/moe_kernels.py); (0, 0) for a dense layer."""
    view = _moe_view(model)
    if view is None:
        return 0.0, 0.0
    shape = moe_shape(r, view.model)
    return _memory_bound_s(r, moe_bytes(shape, 0)), _memory_bound_s(r, moe_bytes(shape, 1))


def grouped_slowdown(r: Resolved, model) -> float:
    """How much longer an MoE layer's GEMMs take on the busiest rank for its routed experts
    running as grouped GEMMs over `parallel.expert_imbalance` x the mean rows (1 for a dense
    layer): the routed share s of the layer's FLOPs at the table's grouped share g of the
    dense rate (1 for a GPU whose kernel table measures none), 1 - s + s x imbalance / g.
    Rows a group, the tokens one of this GPU's experts gets: each GPU's T = s·b / t tokens
    go to k experts each (times the capacity factor), over the E / e experts a GPU holds of
    the E (`parallel.expert` = e): k·c·T·e / E, times the imbalance. g weighs each expert
    GEMM's share by its FLOPs (expert_grouped_share). Without expert parallelism, or with a
    capacity factor's padding, no rank is busier than the rest (Moe.busiest)."""
    view = _moe_view(model)
    if view is None:
        return 1.0
    moe, ex, gpu = view.model.moe, r.execution, r.machine.gpu
    imbalance = moe.busiest(ex.parallel.expert_imbalance, ex.parallel.expert)
    tokens = ex.seq_len * ex.training.micro_batch_size / ex.parallel.tensor
    rows = moe.per_token * moe.padding * tokens * ex.parallel.expert / moe.experts * imbalance
    table = kernel_table(gpu.kernels) if gpu.kernels else None
    share = 1.0 if table is None else expert_grouped_share(table, rows, view.model)
    if share == 1.0 and imbalance == 1.0:
        return 1.0  # exactly: dense-rate experts with balanced routing slow nothing
    return busiest_rank_slowdown(routed_flops_share(r, view), share, imbalance)


def expert_grouped_share(table, rows: float, model) -> float:
    """The grouped share of an expert's GEMMs together, each at the share of its contraction
    K (the up / gate projection over the hidden size: 2 of a gated expert's 3 GEMMs' FLOPs, 1
    of 2 ungated; the down projection over the expert's width, the rest), by their time:
    1 / (w_up / g_up + w_down / g_down)."""
    up = (2.0 if model.gated_mlp else 1.0) / (3.0 if model.gated_mlp else 2.0)
    g_up = table.grouped_gemm_share(rows, model.hidden)
    g_down = table.grouped_gemm_share(rows, model.moe.ffn_hidden)
    return 1.0 / (up / g_up + (1.0 - up) / g_down)


def module_recompute(r: Resolved, shape, core: Kernels, split: int, rate: float) -> Kernels:
    """Selective recompute of `training.recompute_modules` (Megatron-Core), FLOP-timed: the
    attention core as above; mlp a dense layer's MLP forward, 2·s·b·h·f x (3 gated, else 2)
    FLOPs; moe an MoE layer's routed experts (their share of its FLOPs, with the router's and
    permutation's bytes; the dispatch's all-to-all not rerun here); layernorm the bytes (read
    and write) of the norms of their own under the TE layer spec (`separate_norms`: an MoE
    layer's pre-MLP norm, latent attention's input norm; none in a dense layer). `split`:
    tensor x context."""
    modules, ex = r.accounting.recompute_modules, r.execution
    model = shape.model if isinstance(shape, LayerView) else shape
    index = shape.index if isinstance(shape, LayerView) else 0
    tokens = ex.seq_len * ex.training.micro_batch_size
    out = core if "core_attn" in modules else Kernels()  # (none where core_recomputed says so)
    if "mlp" in modules and not model.is_moe(index):
        mats = 3 if model.gated_mlp else 2
        out += Kernels(2.0 * tokens * model.hidden * model.ffn_hidden * mats / split / rate)
    if "moe" in modules and model.is_moe(index):
        layer = LayerView(model, index)
        routed = routed_flops_share(r, layer) * layer.layer_forward_flops(ex.seq_len, 1)
        permute = moe_block_s(r, layer)[0]  # the router and permutation run again too
        out += Kernels(routed * ex.training.micro_batch_size / split / rate, permute)
    if "mla_up_proj" in modules and model.mla is not None:  # Q's and KV's up-projections
        mla, heads = model.mla, model.heads
        q_up = (mla.q_rank or 0) * heads * (mla.nope + mla.rope)
        up = q_up + mla.kv_rank * heads * (mla.nope + mla.v)
        out += Kernels(2.0 * tokens * up / split / rate)
    own = sum(separate_norms(model, index)) if "layernorm" in modules else 0
    if own:  # split over tensor ranks under sequence parallelism only
        t = ex.parallel.tensor if ex.parallel.sequence else 1
        per_norm = 2.0 * r.accounting.compute_bytes * tokens * model.hidden
        out += Kernels(memory_s=_memory_bound_s(r, own * per_norm / t / ex.parallel.context))
    return out


def _alone_s(c: Comm | None, cap: dict[tuple[str, str], float]) -> float:
    return 0.0 if c is None else c.latency_s + c.nbytes / cap[c.resource]


def _rest_times(r: Resolved, model, hidden: int | None, stage: int, cap: dict) -> tuple:
    """Forward and backward seconds of one stage's rest unit for one micro-batch: the output
    head on the last stage, the tensor-parallel embedding and head collectives."""
    fwd, bwd, again = compute_times(
        r, model, False, stage == r.execution.parallel.pipeline - 1, stage == 0
    )
    bwd += again  # the MTP modules' recompute, before their backward (0 elsewhere)
    tp_f, tp_b, hidden_c = rest_tensor_comms(r, hidden, stage)
    bwd += hidden_s(r, [hidden_c], bwd, cap)
    return fwd + _alone_s(tp_f, cap), bwd + _alone_s(tp_b, cap)


def _stage_chunk_times(r: Resolved, model, stage_layers: list[list], cap: dict, hidden) -> tuple:
    """Forward and backward seconds of one micro-batch through each (stage, chunk), from each
    stage's own layers (`stage_layers[k]`: alike where the model's layers are, else a
    DeepSeek's first dense layers make its first stage unlike the rest); the embedding joins
    stage 0's first chunk, the output head the last stage's last chunk (Megatron's placement)."""
    par = r.execution.parallel
    p, v = par.pipeline, par.virtual_pipeline
    fwd, bwd = [], []
    summed: dict[int, tuple[float, float]] = {}  # by layer list: stages alike share one
    for k, layers in enumerate(stage_layers):
        if par.stage_layers is not None:  # uneven chunks: each its own layers
            f_k, b_k = _uneven_chunk_times(par, k, layers, cap)
            fwd.append(f_k)
            bwd.append(b_k)
            continue
        if id(layers) not in summed:  # (a stage's layers in order: the same sums)
            times = [_unit_times(u, cap) for u in layers]
            summed[id(layers)] = (sum(f for f, _ in times), sum(b for _, b in times))
        f, b = summed[id(layers)]
        fwd.append([f / v] * v)
        bwd.append([b / v] * v)
    for stage, chunk in ((0, 0), (p - 1, v - 1)):
        rest_f, rest_b = _rest_times(r, model, hidden, stage, cap)
        fwd[stage][chunk] += rest_f
        bwd[stage][chunk] += rest_b
    return fwd, bwd


def _unit_times(u, cap: dict) -> tuple[float, float]:
    """One layer unit's forward and backward seconds for one micro-batch, with the
    collectives that block its stream."""
    f = (
        u.forward_s
        + _alone_s(u.tp_forward, cap)
        + _alone_s(u.ep_forward, cap)
        + _alone_s(u.cp_forward, cap)
    )
    b = (
        u.backward_s
        + u.recompute_s
        + _alone_s(u.tp_backward, cap)
        + _alone_s(u.ep_backward, cap)
        + _alone_s(u.cp_backward, cap)
    )
    return f, b


def _uneven_chunk_times(par, stage: int, layers: list, cap: dict) -> tuple[list, list]:
    """Forward and backward seconds of each of `stage`'s chunks under
    `parallel.stage_layers`: chunk i holds the layers of list entry stage + i·p."""
    split, p = par.stage_layers, par.pipeline
    starts = [sum(split[:j]) for j in range(len(split) + 1)]
    fwd, bwd = [0.0] * par.virtual_pipeline, [0.0] * par.virtual_pipeline
    for u in layers:
        index = layer_index(u.name)
        entry = next(j for j in range(len(split)) if starts[j] <= index < starts[j + 1])
        f, b = _unit_times(u, cap)
        fwd[entry // p] += f
        bwd[entry // p] += b
    return fwd, bwd


def layer_index(name: str) -> int:
    """The model layer a unit belongs to: 'L7' and 'L7.experts' are layer 7."""
    return int(re.match(r"L(\d+)", name).group(1))


def _each_stage_layers(r: Resolved, model, units: list, stage: int, stage_units) -> list[list]:
    """The layer units of every pipeline stage: the simulated stage's for all where layers are
    alike, else each stage's own (`stage_units(k)`: stage k's, built as the simulated one's)."""
    p = r.execution.parallel.pipeline
    if not model.is_moe_model and r.execution.parallel.stage_layers is None:
        return [units[:-1]] * p
    return [units[:-1] if k == stage else stage_units(k)[:-1] for k in range(p)]


def bubble(
    r: Resolved, model, units: list, cap: dict, hidden: int | None, stage: int, stage_units
) -> tuple:
    """Pipeline idle time per step of the simulated stage, the part of it after the stage's
    last backward, and the uniform pipeline's fill and drain within it: the all-stage
    schedule's step time minus this stage's own work (fill, drain, the point-to-point
    exchanges, waiting on the last stage's output head); after its last backward a stage
    waits only for the pipeline's end (stage 0: not at all). The point-to-point exchanges
    as Megatron's schedule runs them, blocking (tiersim.workload.pipeline_p2p): plain 1F1B
    one send on each forward and each backward; interleaved one batched exchange per
    forward-backward pair, half of it on each op, the data arriving half an exchange later."""
    par, m = r.execution.parallel, r.execution.training.grad_accumulation
    if par.pipeline == 1:
        return 0.0, 0.0, 0.0, 0.0
    p2p, arrive = op_costs(r, hidden)  # per op, and the data's later arrival (pipeline_p2p)
    layers = _each_stage_layers(r, model, units, stage, stage_units)
    fwd, bwd = _stage_chunk_times(r, model, layers, cap, hidden)
    fwd = [list(map(add, row, repeat(p2p))) for row in fwd]  # x + p2p, time by time
    bwd = [list(map(add, row, repeat(p2p))) for row in bwd]
    # combined 1F1B: the warm-up's and cool-down's passes alone (pipeline_alone), those
    # that fill and drain the pipeline
    fill_f, fill_b = fwd, bwd
    if combined_1f1b(r):
        alone = _stage_chunk_times(r, model, _alone_layers(layers), cap, hidden)
        fill_f, fill_b = ([list(map(add, row, repeat(p2p))) for row in t] for t in alone)
        times = (fwd, bwd, fill_f, fill_b)
        timing = evaluate_alone(par.pipeline, m, par.virtual_pipeline, times, arrive)
    else:
        timing = evaluate_steady(par.pipeline, m, par.virtual_pipeline, fwd, bwd, arrive)
    own = timing.busy_s[stage] - 2.0 * p2p * m * par.virtual_pipeline
    idle = max(0.0, timing.step_s - own)
    mean = (sum(fill_f[stage]) + sum(fill_b[stage])) / par.virtual_pipeline
    fill = pipeline.bubble_s(par.pipeline, mean, 0.0)
    after = min(idle, max(0.0, timing.step_s - timing.finish_s[stage]))
    return idle, after, fill, 2.0 * p2p * par.virtual_pipeline


def _alone_layers(stage_layers: list[list]) -> list[list]:
    """Each stage's layer units as its passes alone run them (experts.alone_unit); stages
    that share one list share its copy."""
    copies: dict[int, list] = {}
    for layers in stage_layers:
        if id(layers) not in copies:
            copies[id(layers)] = [alone_unit(u) for u in layers]
    return [copies[id(layers)] for layers in stage_layers]


def chunks(
    n_layers: int, virtual: int, embedding_first: bool, counts: list[int] | None = None
) -> tuple[tuple[int, ...], ...]:
    """Layers split evenly into `virtual` chunks (or `counts` units each); the stage's rest
    unit (index n_layers) opens the first chunk where it is only the embedding (stage 0 of a
    pipeline), else closes the last (the output head, after the layers)."""
    per = n_layers // virtual
    counts = counts or [per] * virtual
    starts = [sum(counts[:c]) for c in range(virtual + 1)]
    chunks = [list(range(starts[c], starts[c + 1])) for c in range(virtual)]
    if embedding_first:
        chunks[0].insert(0, n_layers)
    else:
        chunks[-1].append(n_layers)
    return tuple(tuple(c) for c in chunks)


def alone_visits_of(r: Resolved, stage: int, n_layers: int) -> list | None:
    """Each of the stage's units' (its layers' `n_layers` and its rest's) forwards and
    backwards that run alone under combined 1F1B (pipeline.alone_visits); None without it."""
    if not combined_1f1b(r):
        return None
    par = r.execution.parallel
    first = stage == 0 < par.pipeline - 1
    by_chunk = chunks(n_layers, par.virtual_pipeline, first, chunk_units(par, stage, n_layers))
    m = r.execution.training.grad_accumulation
    return pipeline.alone_visits(by_chunk, stage, par.pipeline, m)


def chunk_units(par, stage: int, n_units: int) -> list[int] | None:
    """Units in each of the stage's chunks under `parallel.stage_layers` (None: even)."""
    if par.stage_layers is None:
        return None
    layers = [par.stage_layers[stage + i * par.pipeline] for i in range(par.virtual_pipeline)]
    per_layer = n_units // max(1, sum(layers))
    return [n * per_layer for n in layers]
