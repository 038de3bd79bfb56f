"""What one layer holds over the step, for the memory timeline (state/step_memory.py): its
parameters (gathered, their FP8 copies), what it saves and recomputes, its backward
transients, and on the busiest expert rank the routed rows beyond the mean."""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.state.activation_kinds import divided
from tiersim.state.activations import layer_items
from tiersim.state.activations_moe import hf_moe_backward_moments
from tiersim.state.fp8 import (
    fp8_layouts,
    fp8_weight_bytes,
    fp8_weight_pieces,
    gemm_cast_bytes,
    linear_values,
)
from tiersim.state.fp8_casts import TORCHAO_CASTS, TORCHAO_RECIPES, layer_cast_bytes
from tiersim.state.inventory import per_context_rank, rank_matrices, stage_layers
from tiersim.state.model import Transformer
from tiersim.state.op_recompute import op_working_bytes
from tiersim.state.resolved import Resolved
from tiersim.state.selective_order import core_backward_peak, freed_before_core
from tiersim.state.timeline import Pieces
from tiersim.state.timeline_size import check_timeline_size

FP8_COPIES = "FP8 weight copies (training.fp8)"


@record
class LayerMemory:
    params: int  # values on this GPU after tensor/expert division
    tensors: int  # parameter tensors
    largest: int  # values of its largest parameter tensor
    saved: float  # bytes kept for backward, one micro-batch
    recompute: float  # bytes recomputed in backward (full: the whole set; selective: s²)
    working: float  # backward transients
    items: int  # tensors it saves with recompute none (how the allocator sees them)
    module: int = 0  # values of its largest module fetched whole (transformers' fused experts)
    fp8: int = 0  # bytes of its linear weights' FP8 copies (training.fp8)
    fp8_values: int = 0  # values of those linear weights
    fp8_pieces: tuple[int, ...] = ()  # their tensors' bytes (fp8.fp8_weight_pieces)
    # the tensors it saves with recompute none, one GPU's bytes each (the allocator's
    # requests); empty where not known apart (recompute): `items` equal ones
    saved_sizes: tuple[float, ...] = ()
    # torchao's FP8 casts live at once in its forward and in its backward (state/fp8_casts.py)
    fp8_cast: tuple[int, int] = (0, 0)
    fp8_cast_pieces: tuple[int, int] = (2, 2)  # their tensors: each cast's data and scales
    busiest: float = 0.0  # the busiest expert rank's routed rows beyond the mean, bytes
    # selective: bytes of `saved` (and its tensors) freed in backward before the attention
    # core is recomputed (state/selective_order.py); 0: the whole set held through it
    first: float = 0.0
    first_items: int = 0
    # FSDP2: the backward transients where the weights' gradients made whole are the tensors
    # kept as the unsharded `.grad` (an MoE layer's under huggingface: the experts'), those
    # gradients inside; 0 where the layer has no such moment (its first gradient apart)
    kept_working: float = 0.0
    # selective under huggingface: the backward transients left when the core recomputes (the
    # gradient flowing between layers; the MLP's freed by then); 0: `working` held throughout
    core_working: float = 0.0
    # and the values of its weights' gradients made before the core (all but q, k, v, their
    # biases and norms, and the input norm's)
    core_grads: int = 0

    def fp8_live(self, torchao: bool, backward: bool = False) -> tuple[str, int, Pieces]:
        """The part, bytes and tensors of its FP8 state live at once: torchao's casts of the
        GEMMs' operands (forward's or backward's), else every linear weight's both layouts."""
        if torchao:
            return TORCHAO_CASTS, self.fp8_cast[backward], self.fp8_cast_pieces[backward]
        return FP8_COPIES, self.fp8, self.fp8_pieces or 2 * self.tensors

    def saved_pieces(self) -> Pieces:
        """The tensors of the saved set allocated in its forward (all but `first`'s)."""
        return self.saved_sizes or self.items - self.first_items


def fp8_pieces(layers: list[LayerMemory]) -> Pieces:
    """The cached FP8 copies of these layers' weights, tensor by tensor."""
    return tuple(p for lay in layers for p in lay.fp8_pieces) or 2 * len(layers)


def layer_memory(r: Resolved, stage: int) -> list[LayerMemory]:
    check_timeline_size(r)  # before a list of the stage's layers is made
    par, tr, seq = r.execution.parallel, r.execution.training, r.execution.seq_len
    acc, model = r.accounting, r.model
    mats = rank_matrices(r, stage)[:-1]
    held = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    shapes = [u.shape for u in held for _ in range(u.count)]
    out = []
    for mat, shape in zip(mats, shapes, strict=True):

        def kept(recompute: str, shape=shape) -> float:
            args = (seq, tr.micro_batch_size, par.tensor, par.sequence, recompute, acc)
            return per_context_rank(r, shape.layer_activation_bytes(*args))

        saved = kept(tr.recompute)
        # recomputed in backward: the whole set but what the layer keeps (full: its input,
        # the checkpoint's, already there; selective: all but the s² terms)
        again = kept("none") - saved if tr.recompute in ("full", "selective") else 0
        if tr.recompute == "selective_op":  # torchtitan's op-level policy (op_recompute.py)
            working = op_working_bytes(
                model, seq, tr.micro_batch_size, acc, par.tensor, par.sequence
            )
            again = per_context_rank(r, model.activation_factor * working)
        index = getattr(shape, "index", 0)
        items = len(layer_items(model, seq, 1, acc, index)) if isinstance(model, Transformer) else 1
        busiest = _busiest_extra(r, index)
        first = _freed_first(r, index)
        if tr.recompute == "full":  # kept in the recompute working set, not between passes
            again, busiest = again + busiest, 0.0
        out.append(
            LayerMemory(
                params=sum(m.size for m in mat),
                tensors=sum(m.count for m in mat),
                largest=_largest_tensor(r, mat),
                saved=saved,
                **_core_moment(r, index, again, first[0], sum(m.size for m in mat)),
                working=_working(r, index),
                kept_working=_working(r, index, grads_kept=True),
                items=items,
                module=_largest_module(r, mat),
                **_fp8_copies(r, mat),
                saved_sizes=_saved_sizes(r, index) if tr.recompute == "none" else (),
                **_torchao_casts(r, mat),
                busiest=busiest,
                first=first[0] if again else 0.0,
                first_items=first[1] if again else 0,
            )
        )
    return out


def _fp8_copies(r: Resolved, mats) -> dict:
    """LayerMemory's fp8, fp8_values and fp8_pieces: its linear weights' cached FP8 copies."""
    fp8 = r.execution.training.fp8
    if fp8 is None:
        return {}
    layouts = fp8_layouts(r)
    return {
        "fp8": fp8_weight_bytes(fp8.recipe, mats, layouts),
        "fp8_values": linear_values(mats),
        "fp8_pieces": fp8_weight_pieces(fp8.recipe, mats, layouts),
    }


def _saved_sizes(r: Resolved, index: int) -> tuple[float, ...]:
    """Each tensor layer `index` keeps for its backward (the accounting's items), one GPU's
    bytes: divided over t (and under sequence parallelism), a context rank's share."""
    model, par, tr = r.model, r.execution.parallel, r.execution.training
    if not isinstance(model, Transformer):
        return ()
    items = layer_items(model, r.execution.seq_len, tr.micro_batch_size, r.accounting, index)
    factor = model.activation_factor
    return tuple(
        per_context_rank(r, factor * divided([i], par.tensor, par.sequence)) for i in items
    )


def _torchao_casts(r: Resolved, mats) -> dict:
    """LayerMemory's fp8_cast and its pieces: torchao's casts of the largest linear's
    operands (state/fp8_casts.py); under the blockwise and mxfp8 prototypes the largest
    weight's cast alone (state/fp8.py gemm_cast_bytes)."""
    fp8 = r.execution.training.fp8
    if fp8 is None:
        return {}
    if fp8.recipe not in TORCHAO_RECIPES:
        weight = gemm_cast_bytes(fp8.recipe, mats)
        return {"fp8_cast": (weight, weight)}
    tokens = r.execution.seq_len * r.execution.training.micro_batch_size
    tokens //= r.execution.parallel.context
    casts = 2 if fp8.recipe == "rowwise_with_gw_hp" else 4  # the backward's
    return {
        "fp8_cast": layer_cast_bytes(fp8.recipe, mats, tokens, not fp8.param_gather),
        "fp8_cast_pieces": (2 * 2, 2 * casts),
    }


def _freed_first(r: Resolved, index: int) -> tuple[float, int]:
    """Under selective recompute and the huggingface accounting, the bytes and tensors of a
    layer's saved set its backward frees before the attention core recomputes (the MLP's, the
    post-attention norm's, the out-projection's input; state/selective_order.py)."""
    model, par, tr = r.model, r.execution.parallel, r.execution.training
    acc = r.accounting
    if tr.recompute != "selective" or acc.implementation != "huggingface":
        return 0.0, 0
    if not isinstance(model, Transformer):
        return 0.0, 0
    seq, b = r.execution.seq_len, tr.micro_batch_size
    share = freed_before_core(layer_items(model, seq, b, acc, index))
    nbytes = model.activation_factor * divided(share, par.tensor, par.sequence)
    return per_context_rank(r, nbytes), len(share)


def _core_moment(r: Resolved, index: int, again: float, freed: float, params: int) -> dict:
    """LayerMemory's recompute and core_working: `again`, where no share of the saved set is
    freed before the core; else, selective under huggingface, what the attention core's
    recompute and backward hold at their peak (selective_order.core_backward_peak; at least
    `again`) and the backward transients beside it, the gradient flowing between layers."""
    if not (freed and again):
        return {"recompute": again}
    model, par, tr, acc = r.model, r.execution.parallel, r.execution.training, r.accounting
    seq, b = r.execution.seq_len, tr.micro_batch_size
    assert isinstance(model, Transformer)  # a share freed: a transformer's (_freed_first)
    items = layer_items(model, seq, b, acc, index)  # the softmax output: split over t
    kept_kv = 2.0 * acc.compute_bytes * seq * b * model.kv_heads * model.head_dim
    core = core_backward_peak(items, kept_kv)
    peak = per_context_rank(r, model.activation_factor * core / par.tensor)
    flowing = acc.compute_bytes * seq * b * model.hidden / (par.tensor if par.sequence else 1)
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    after = (h * q + 2 * h * kv + (q + 2 * kv) * model.qkv_bias) // par.tensor
    after += 2 * model.head_dim * model.qk_norm + h * (2 if model.norm == "layernorm" else 1)
    grads = params - after
    core = {"recompute": max(again, peak), "core_working": per_context_rank(r, flowing)}
    return core | {"core_grads": grads if model.mla is None else 0}


HF_ROUTED = ("dispatched rows", "gate/up output", "experts' outputs")  # activations_moe.py


def _busiest_extra(r: Resolved, index: int) -> float:
    """Under expert parallelism the busiest rank receives `expert_imbalance` x the mean of the
    dispatched rows: what its routed-row tensors keep beyond the mean, one micro-batch (the
    accounting's own routed terms: megatron's k·T rows of 2h + wide·f + 2h 16-bit values,
    transformers' dispatched rows, gate/up, SiLU and product, and experts' outputs)."""
    model, par, tr = r.model, r.execution.parallel, r.execution.training
    if not isinstance(model, Transformer) or not model.is_moe(index) or par.expert == 1:
        return 0.0
    moe, acc, tokens = model.moe, r.accounting, r.execution.seq_len * tr.micro_batch_size
    if acc.implementation == "megatron":
        rows = tokens * moe.per_token * moe.padding
        wide = 6.0 if model.gated_mlp else 4.0
        routed = rows * (4.0 * model.hidden + wide * moe.ffn_hidden) * acc.compute_bytes / 2
    else:
        items = layer_items(model, r.execution.seq_len, tr.micro_batch_size, acc, index)
        routed = sum(i.nbytes for i in items if i.name.startswith(HF_ROUTED))
    return per_context_rank(
        r, (moe.busiest(par.expert_imbalance, par.expert) - 1) * routed / par.tensor
    )


def _largest_module(r: Resolved, mats) -> int:
    """Values of a module a submodule fetch gathers whole beyond max_live_parameters:
    transformers 5 fuses a layer's experts into one module (all the rank's experts at once);
    else none (a linear layer larger than that is tiled: offload.tiling, ZeRO-Infinity)."""
    experts = sum(m.size for m in mats if m.expert)
    return experts if r.accounting.implementation == "huggingface" else 0


def _largest_tensor(r: Resolved, mats) -> int:
    """Values of the layer's largest parameter tensor: under transformers 5 the rank's routed
    experts are two fused tensors, gate_up_proj [E, 2f, h] (up_proj [E, f, h] ungated) and
    down_proj [E, h, f] (DeepseekV3Experts, MixtralExperts); else one matrix."""
    largest = max((m.rows * m.cols for m in mats), default=0)
    model = r.model
    if r.accounting.implementation != "huggingface" or not isinstance(model, Transformer):
        return largest
    experts = sum(m.size for m in mats if m.expert)
    up_share = 2 / 3 if model.gated_mlp else 1 / 2  # gate and up of gate, up and down
    return max(largest, round(experts * up_share))


def _working(r: Resolved, index: int, grads_kept: bool = False) -> float:
    """A layer's backward transients: the gradient flowing between layers (s·b·h, split under
    sequence parallelism) and two of the MLP's s·b·f gradients (split over t); under the
    huggingface accounting an MoE layer's the largest of its routed experts' three backward
    moments in their place (activations_moe.hf_moe_backward_moments). `grads_kept`: those
    moments with the experts' gradients kept (FSDP2), and 0 for a layer without them."""
    model = r.model
    if not isinstance(model, Transformer):
        return 0.0
    par, tr = r.execution.parallel, r.execution.training
    tokens = r.execution.seq_len * tr.micro_batch_size
    cb = r.accounting.compute_bytes
    moe = model.moe if model.moe is not None and model.is_moe(index) else None
    width = moe.ffn_hidden * moe.per_token if moe else model.ffn_hidden
    flowing = cb * tokens * model.hidden / (par.tensor if par.sequence else 1)
    mlp = 2 * cb * tokens * width / par.tensor
    if moe and r.accounting.implementation == "huggingface":
        experts, again = moe.experts // par.expert, tr.recompute == "full"
        args = (moe, model.hidden, tokens, cb, experts, again, grads_kept)
        mlp = max(m.nbytes for m in hf_moe_backward_moments(*args)) / par.tensor
    elif grads_kept:
        return 0.0
    return per_context_rank(r, flowing + mlp)
