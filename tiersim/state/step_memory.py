"""The GPU's memory timeline of one training step (state/timeline.py), built from a resolved
scenario and its inventory: one GPU of the stage that peaks, the last micro-batch of the step
(the others' saved activations held as the pipeline holds them), then the optimizer step.

In order (docs/memory.md says what is and is not counted, and why):

1. start: the classes homed in GPU memory (weights, gradients, master, optimizer, workspace)
   as the inventory counts them; gradients stay allocated all step (flat gradient buffers of
   DeepSpeed and Megatron, `zero_grad(set_to_none=False)`); the saved activations of the other
   micro-batches in flight; outside the allocator, the CUDA context and NCCL's buffers.
2. forward, layer by layer: sharded or offloaded weights gathered in the compute precision, the
   current layer and those prefetched (FSDP2: `simulation.prefetch_depth`; else the next one),
   released after the layer or kept to backward; the layer's saved activations. At
   the last stage, the final norm's and head's inputs (under `megatron` beside its layers:
   loss_memory.head_inputs), and the loss: the logits (s·b·V/t in the compute precision) and
   their fp32 copy; `huggingface` keeps the fp32 log-softmax (F.cross_entropy), `megatron`
   turns the fp32 copy into the softmax in place and keeps it (vocab_parallel_cross_entropy).
3. backward: the loss's gradients (huggingface: nll_loss_backward's fp32 s·b·V/t and
   log_softmax_backward's, beside the saved log-softmax; megatron: in place, then the cast's
   gradient in the compute precision), then layer by layer in reverse: gathered weights again,
   the recompute working set (full: the layer's whole saved set; selective: its s² terms, under
   `huggingface` after the MLP's share of the saved set is freed: state/selective_order.py), the
   layer's backward transients (the gradient flowing between layers, s·b·h, and two of the
   MLP's s·b·f gradients), sharded gradients' unsharded copy before the reduce-scatter.
4. optimizer, after the pipeline's flush (no other micro-batch's activations left): DeepSpeed
   ZeRO-1/2 builds an fp32 copy of the rank's gradient partition before it frees the 16-bit
   gradients (stage_1_and_2.py `step()`: single_grad_partition), ZeRO-3 one sub-group
   (sub_group_size, 1e9) at a time (stage3.py); a PyTorch optimizer its step's temporaries
   (state/optimizers.py); Megatron's fused Adam none. apex's (NeMo's) gradient shards come
   earlier, in the last backward or the cool-down (state/apex_grad_sync.py), held to the step."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.records import record
from tiersim.state import apex_grad_sync as apex_sync
from tiersim.state import deepspeed_buckets as ds_buckets
from tiersim.state.ddp_buckets import DDP_BUCKETS, ddp_bucket_bytes
from tiersim.state.fp8 import recast_per_pass
from tiersim.state.fsdp2_memory import Fsdp2, Group, fsdp2_of, padded_group_values
from tiersim.state.inventory import Inventory, rank_matrices, stage_bytes, tier_use
from tiersim.state.layer_memory import FP8_COPIES as FP8
from tiersim.state.layer_memory import LayerMemory, fp8_pieces, layer_memory
from tiersim.state.loss_memory import (
    HEAD_GRAD,
    HEAD_INPUTS,
    final_norm_transients,
    head_inputs,
    loss_events,
    outside_saved,
)
from tiersim.state.loss_memory import logits_values as logits_values  # re-exported
from tiersim.state.outside_allocator import CUDA_CONTEXT_BYTES as CUDA_CONTEXT_BYTES
from tiersim.state.outside_allocator import outside_terms
from tiersim.state.pipeline_outputs import PIPELINE_OUTPUTS, kept_output_bytes, output_bytes
from tiersim.state.placement import homes
from tiersim.state.resolved import Resolved
from tiersim.state.selective_order import recompute_core
from tiersim.state.step_optimizer import optimizer_step
from tiersim.state.timeline import Event, Pieces, Timeline, evaluate, fit_pieces
from tiersim.state.vocab_grads import VocabGrads, embedding_grads, vocab_grads
from tiersim.state.zero3_prefetch import Zero3Gathers, zero3_gathers
from tiersim.state.zeropp import SecondaryEvents

GATHER_WINDOW = 2  # layers of gathered weights live at once: the current one and the next


@dataclass
class _Steps:
    """Events as they are added; a zero-byte allocation is no event."""

    events: list[Event] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)

    def alloc(
        self, moment: str, phase: str, key: str, part: str, nbytes: float, pieces: Pieces = 1
    ) -> None:
        n = math.ceil(nbytes)
        if n > 0:
            self.events.append(Event(moment, phase, key, part, n, True, fit_pieces(pieces, n)))
            self.held[key] = n

    def free(self, moment: str, phase: str, key: str, part: str) -> None:
        n = self.held.pop(key, 0)
        if n:
            self.events.append(Event(moment, phase, key, part, n, False))


def _gathered(r: Resolved) -> bool:
    """Weights that are not whole in GPU memory between uses: gathered (ZeRO-3, FSDP) or
    fetched (offloaded) for each layer."""
    gpu = r.machine.gpu.memory
    shards = r.execution.parallel.zero_stage == 3 or r.execution.parallel.shard.weights
    return bool(shards) or homes(r.execution.placement, r.machine)["weights"] != gpu


def _reshard(r: Resolved) -> bool:
    """Gathered weights freed after each layer's forward: unless `reshard_after_forward` is
    false (null: the framework's behaviour, ZeRO-3 and FSDP reshard)."""
    return r.execution.parallel.reshard_after_forward is not False


def _start(steps: _Steps, r: Resolved, per_gpu, experts, held: float, stage: int, hpz) -> None:
    gpu = r.machine.gpu.memory
    use = tier_use(r, per_gpu, experts)[gpu]
    for cls, nbytes in use.classes.items():  # hpZ's secondary partition as its own events
        if cls != "activations":
            nbytes -= hpz.total if cls == "weights" else 0
            steps.alloc("start of the step", "start", cls, f"resident {cls}", nbytes)
    hpz.at_start(steps, "start of the step")
    steps.alloc("start of the step", "start", "held", apex_sync.HELD, held)
    ddp = ddp_bucket_bytes(r, use.classes.get("weights", 0))  # state/ddp_buckets.py
    steps.alloc("start of the step", "start", "ddp buckets", DDP_BUCKETS, ddp)
    ds_buckets.bucket_at_start(steps, r, stage)  # ZeRO-3's reduce bucket, Muon's momentum


@record
class _Plan:
    """What the step's layer loop needs to know, worked out once."""

    gather: bool  # weights gathered or fetched per layer
    window: int  # layers gathered at once
    max_live: float  # DeepSpeed's max_live_parameters (values) where fetched by submodule
    reshard: bool  # gathered weights released after each layer's forward
    on_gpu: bool  # saved activations live in GPU memory
    cb: int  # compute precision's bytes
    rest: int  # parameters of the stage's embeddings, final norm and head on one GPU
    hpz: SecondaryEvents  # DeepSpeed ZeRO++ hpZ's secondary partition (state/zeropp.py)
    grad_bytes: int  # an unsharded gradient's bytes per value
    fp8_params: bool = False  # training.fp8.param_gather: the FP8 copies are the weights
    fp8_recast: bool = False  # FP8 copies cast in each pass, not cached (state/fp8.py)
    fsdp2: Fsdp2 | None = None  # FSDP2's own buffers (state/fsdp2_memory.py)
    groups: tuple[Group, ...] = ()  # FSDP2's: each layer's, then the root group's
    zero3: Zero3Gathers | None = None  # DeepSpeed ZeRO-3's coordinator (state/zero3_prefetch.py)


def _plan(r: Resolved, layers: list[LayerMemory], stage: int) -> _Plan:
    tr, plan = r.execution.training, r.execution.offload
    cb = r.accounting.compute_bytes
    submodule = plan.fetch == "submodule" and plan.max_live_parameters
    max_live = float(plan.max_live_parameters) if submodule else math.inf
    biggest = max((lay.params for lay in layers), default=0)
    p = _Plan(
        gather=_gathered(r),
        window=GATHER_WINDOW if GATHER_WINDOW * biggest <= max_live else 1,
        max_live=max_live,
        reshard=_reshard(r),
        on_gpu=homes(r.execution.placement, r.machine)["activations"] == r.machine.gpu.memory,
        cb=cb,
        rest=(rest := sum(m.size for m in rank_matrices(r, stage)[-1])),
        hpz=SecondaryEvents.of_stage(r, stage, r.machine.gpu.memory),
        grad_bytes=cb if tr.framework == "fsdp" else PRECISION_BYTES[tr.precision.gradients],
        fp8_params=tr.fp8 is not None and tr.fp8.param_gather,
        fp8_recast=recast_per_pass(r),
    )
    if tr.framework == "fsdp" and p.gather:  # FSDP2's groups: each layer, and the root
        groups = [(str(i), "layer", lay) for i, lay in enumerate(layers)] + [("rest", "rest", None)]
        p = replace(p, fsdp2=fsdp2_of(r), groups=tuple(_group(r, p, *g, rest) for g in groups))
    if p.gather and tr.framework == "deepspeed" and plan.fetch == "submodule":
        p = replace(p, zero3=zero3_gathers(r, stage, cb))
    return p


def _group(r: Resolved, p: _Plan, key: str, unit: str, lay: LayerMemory | None, rest: int):
    values = padded_group_values(r, unit, lay.params if lay else rest)
    nbytes = _gathered_bytes(p, lay, values) if lay else values * p.cb
    return Group(key, math.ceil(nbytes), values * p.grad_bytes, lay.tensors if lay else 3, values)


def _gathered_bytes(p: _Plan, lay: LayerMemory, values: float) -> float:
    """`values` of the layer's parameters as gathered: in the compute precision, or where
    training.fp8.param_gather, the linear weights' FP8 bytes and the rest in it."""
    if p.fp8_params:
        whole = lay.fp8 + (lay.params - lay.fp8_values) * p.cb
        return whole * values / max(1, lay.params)
    return values * p.cb


def _gather(steps: _Steps, p: _Plan, layers: list[LayerMemory], at: str, phase: str, js) -> None:
    for j in js:
        if f"gathered {j}" not in steps.held:
            lay = layers[j]  # DeepSpeed's fetch: up to max_live, a module always whole
            values = max(min(lay.params, p.max_live), lay.module if p.max_live < lay.params else 0)
            nbytes = _gathered_bytes(p, lay, values)
            steps.alloc(at, phase, f"gathered {j}", "gathered weights", nbytes, lay.tensors)


def _forward(steps: _Steps, p: _Plan, layers: list[LayerMemory]) -> None:
    hpz = p.hpz  # ZeRO++ hpZ's secondary partition, made as each unit's forward releases it
    hpz.made(steps, "forward: embeddings", len(layers))
    for i, lay in enumerate(layers):
        at = f"forward: layer {i}"
        if p.fsdp2:  # the previous group's all-gather buffer kept to this copy-out
            p.fsdp2.unshard(steps, at, "forward", p.groups[i])
            p.fsdp2.release(steps, at, "forward", str(i - 1) if i else "rest")
            p.fsdp2.forward_prefetch(steps, at, p.groups, i)
        elif p.zero3:
            p.zero3.enter(steps, at, "forward")
        elif p.gather:
            _gather(steps, p, layers, at, "forward", range(i, min(i + p.window, len(layers))))
        saved, first = (lay.saved, lay.first) if p.on_gpu else (0, 0)
        pieces = lay.saved_pieces()
        steps.alloc(at, "forward", f"saved {i}", "saved activations", saved - first, pieces)
        if first:  # freed apart in backward, before the attention core recomputes
            steps.alloc(at, "forward", f"saved first {i}", SAVED, first, lay.first_items)
        extra = lay.busiest if p.on_gpu else 0
        steps.alloc(at, "forward", f"busiest {i}", BUSIEST, extra, 3)
        if p.fp8_recast or (p.gather and not p.fp8_params):  # FP8 copies: cast here
            steps.alloc(at, "forward", f"fp8 {i}", *lay.fp8_live(p.fp8_recast))
        if p.fp8_recast:  # not kept for its backward (recast_per_pass, state/fp8_casts.py)
            steps.free(at, "forward", f"fp8 {i}", lay.fp8_live(True)[0])
        if p.zero3:
            p.zero3.leave(steps, at, "forward")
        elif p.gather and p.reshard:
            steps.free(at, "forward", f"gathered {i}", "gathered weights")
        hpz.made(steps, at, i)


UNSHARDED = "unsharded gradients (before reduce-scatter)"
FINAL_NORM = "final norm's backward transients (fp32)"
BUSIEST = "saved activations: the busiest expert rank's rows beyond the mean"
SAVED = "saved activations"
RECOMPUTE = "recompute working set"


def _backward(
    steps: _Steps, p: _Plan, layers: list[LayerMemory], sharded_grads: bool, apex
) -> None:
    for i in reversed(range(len(layers))):
        lay, at, b = layers[i], f"backward: layer {i}", "backward"
        if p.fsdp2:
            p.fsdp2.pre_backward(steps, at, p.groups, i)
        elif p.zero3:
            p.zero3.enter(steps, at, b)
        elif p.gather:
            _gather(steps, p, layers, at, b, range(i, max(i - p.window, -1), -1))
        if not lay.first:  # recomputed before the layer's backward starts (full)
            steps.alloc(at, b, f"recompute {i}", RECOMPUTE, lay.recompute, lay.items)
        if p.fp8_recast:  # cast again for the backward's GEMMs
            steps.alloc(at, b, f"fp8 {i}", *lay.fp8_live(True, backward=True))
        kept = lay.kept_working if p.fsdp2 else 0.0  # the first gradients inside, FSDP2's
        steps.alloc(at, b, f"working {i}", "backward transients", kept or lay.working, 3)
        if p.fsdp2:  # the first of the layer's gradients, beside all it saved
            first = 0 if kept else lay.largest * p.grad_bytes
            p.fsdp2.first_gradient(steps, at, p.groups[i], first)
        elif sharded_grads:
            # ZeRO: each tensor's as it is reduced, a tiled operator's (ZeRO-Infinity) a
            # tile's, at most what one fetch gathers
            values = min(lay.largest, p.max_live)
            steps.alloc(at, b, f"unsharded {i}", UNSHARDED, values * p.grad_bytes)
        if lay.first:  # selective: the core recomputed once the MLP's share is freed
            recompute_core(steps, at, i, lay, kept, p.fsdp2 and p.groups[i].key, p.grad_bytes)
        for key, part in (
            (f"working {i}", "backward transients"),
            (f"recompute {i}", RECOMPUTE),
            (f"saved {i}", SAVED),
            (f"busiest {i}", BUSIEST),
            (f"fp8 {i}", lay.fp8_live(p.fp8_recast)[0]),
            (f"unsharded {i}", UNSHARDED),
        ):
            steps.free(at, b, key, part)
        if g := apex.in_backward.get(i):  # apex's hooks: the layer's group reduce-scattered
            steps.alloc(at, b, f"apex {g.label}", apex_sync.APEX_GRAD_SHARDS, g.nbytes, g.buckets)
        if p.fsdp2:  # the rest of its gradients, then the reduce-scatter
            p.fsdp2.post_backward(steps, at, p.groups[i])
        elif p.zero3:
            p.zero3.leave(steps, at, b)
        elif p.gather:
            steps.free(at, b, f"gathered {i}", "gathered weights")


def build_events(r: Resolved, inv: Inventory, stage: int) -> list[Event]:
    """The step's allocations and frees on one GPU of `stage` (see the module's docstring)."""
    last = stage == r.execution.parallel.pipeline - 1
    (per_gpu, experts), _, _ = stage_bytes(r, r.model, stage)
    layers = layer_memory(r, stage)
    p = _plan(r, layers, stage)
    outside, log_softmax, head_side = outside_saved(r, stage, last)
    this_mb = sum(lay.saved for lay in layers) + outside
    held = max(0.0, per_gpu["activations"] - this_mb) if p.on_gpu else 0.0
    steps, apex = _Steps(), apex_sync.apex_shards(r, stage)
    kept = kept_output_bytes(r, stage) if p.on_gpu else 0  # NeMo's, to their backward
    share = (this_mb if p.on_gpu else 0, sum(x.items for x in layers))  # what drains, if any
    units = apex_sync.drained(apex, share, output_bytes(r) if kept else 0)
    one = not (apex.cool_down and p.on_gpu)  # else in units, as the cool-down drains them
    _start(steps, r, per_gpu, experts if r.model.is_moe_model else None, held * one, stage, p.hpz)
    steps.alloc("start of the step", "start", "pipeline outputs", PIPELINE_OUTPUTS, kept * one)
    for unit, nbytes in zip(units, (held, kept), strict=True):
        unit.hold(steps, "start of the step", "start", 0 if one else nbytes, whole=True)
    root = _weights_at_start(steps, p, layers, p.rest)
    saves = outside - log_softmax - head_side if p.on_gpu else 0
    steps.alloc("forward: embeddings", "forward", "outside saves", "saved activations", saves, 4)
    _forward(steps, p, layers)
    vocab = vocab_grads(r, stage, p.grad_bytes, root)
    if last:  # what the final norm and head keep, to their backward
        at, mh = "forward: final norm and head", head_inputs(r) * p.on_gpu
        steps.alloc(at, "forward", "head saves", "saved activations", head_side * p.on_gpu, 4)
        steps.alloc(at, "forward", "head inputs", HEAD_INPUTS, mh, 2)
        _loss_with_head(steps, r, p, 0 if root else p.rest, log_softmax, vocab)
        ds_buckets.bucket_at_first_gradient(steps, r, "backward: final norm and head")
        at, b, norm = "backward: final norm and head", "backward", FINAL_NORM
        steps.alloc(at, b, "final norm", norm, final_norm_transients(r) if p.on_gpu else 0, 5)
        steps.free(at, b, "final norm", norm)
        steps.free(at, b, "head saves", "saved activations")
        steps.free(at, b, "head inputs", HEAD_INPUTS)
    _backward(steps, p, layers, bool(inv.sharded.get("gradients")), apex)
    embedding_grads(steps, vocab, p)
    steps.free("backward: embeddings", "backward", "outside saves", "saved activations")
    steps.free("backward: embeddings", "backward", "gathered rest", "gathered weights")
    nxt = [(RECOMPUTE, max((x.recompute for x in layers), default=0))]
    nxt.append(("backward transients", max((x.working for x in layers), default=0)))
    cooled = apex_sync.cool_down_events(steps, apex, units, nxt)
    apex_sync.flushed(
        steps, "cool-down: the pipeline's flush" if cooled else "backward: embeddings"
    )
    ds_buckets.bucket_at_end_of_backward(steps, r, "backward: ZeRO's gradient epilogue", stage)
    p.hpz.around_update(steps, lambda: optimizer_step(steps, r, stage, apex.at_step_buckets))
    return steps.events


def _weights_at_start(steps: _Steps, p: _Plan, layers: list[LayerMemory], rest: int) -> bool:
    """Whole weights' FP8 copies (cached all step, as TE does); FSDP2's root group
    (embeddings, final norm, head) gathered from the forward to its backward. True where the
    root group is held so."""
    if not p.gather:  # with fp8_params they are the resident weights
        fp8 = 0 if p.fp8_params or p.fp8_recast else sum(lay.fp8 for lay in layers)
        steps.alloc("start of the step", "start", "fp8", FP8, fp8, fp8_pieces(layers))
        return False
    if p.zero3:  # DeepSpeed's coordinator: its persistent parameters, the embeddings' fetch
        p.zero3.at_start(steps)
        return False
    if p.max_live < math.inf:  # a submodule fetch (DeepSpeed): the head about the loss alone
        return False
    at = "forward: embeddings"
    if p.fsdp2:  # its all-gather buffer kept to the first layer's copy-out
        p.fsdp2.unshard(steps, at, "forward", p.groups[-1])
        return True
    steps.alloc(at, "forward", "gathered rest", "gathered weights", rest * p.cb, 3)
    return True


def _loss_with_head(
    steps: _Steps, r: Resolved, p: _Plan, head: int, log_softmax: float, vocab: VocabGrads
) -> None:
    """The loss, with the head's parameters gathered about it where fetched per submodule."""
    gathered = min(head, p.max_live) * p.cb if p.gather and not p.zero3 else 0
    steps.alloc("forward: loss", "forward", "gathered head", "gathered weights", gathered, 3)
    if p.zero3:
        p.zero3.enter(steps, "forward: loss", "forward")
    after = functools.partial(_after_the_forward, steps, p)
    loss_events(steps, r, log_softmax, vocab.head, after, vocab.held)
    if not vocab.held:  # AccumulateGrad adds it into .grad
        steps.free("backward: loss", "backward", "d head", HEAD_GRAD)
    steps.free("backward: loss", "backward", "gathered head", "gathered weights")
    if p.zero3:
        p.zero3.leave(steps, "backward: loss", "backward")


def _after_the_forward(steps: _Steps, p: _Plan) -> None:
    """FSDP2's root frees the last layer's all-gather buffer at the end of its forward (and
    its own group, given reshard_after_forward=True), and where layers reshard after forward
    prefetches it again as the backward starts. DeepSpeed's
    coordinator: the head's forward fetches end, its backward's begin."""
    if p.zero3:
        p.zero3.leave(steps, "forward: loss", "forward")
        p.zero3.enter(steps, "backward: loss", "backward")
    if p.fsdp2 and len(p.groups) > 1:
        last = p.groups[-2]  # the last layer's (the root group's is the last)
        p.fsdp2.release(steps, "forward: loss", "forward", last.key)
        p.fsdp2.root_reshard(steps, p.groups[-1])
        if p.reshard:
            p.fsdp2.all_gather(steps, "backward: loss", "backward", last)


def gpu_timeline(r: Resolved, inv: Inventory) -> Timeline:
    """The GPU's timeline of the stage that peaks highest: the inventory's, or the last (the
    loss's transients are there)."""
    gpu = r.machine.gpu.memory
    capacity = inv.tiers[gpu].capacity_bytes
    outside = outside_terms(r)
    stages = sorted({inv.stage, r.execution.parallel.pipeline - 1})
    timelines = [evaluate(gpu, capacity, build_events(r, inv, k), outside) for k in stages]
    return max(timelines, key=lambda t: (not t.fits, t.peak_reserved_bytes, t.peak_allocated_bytes))
