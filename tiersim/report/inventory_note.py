"""The inventory table's note on how its per GPU column comes from its whole model column,
class by class: which of tensor, pipeline and expert parallelism and ZeRO's data sharding
divide each, with each group's actual size, and what no split touches.

It states what state/inventory.py computes; it computes nothing of its own beyond counts.
"""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.config.zeropp import hpz_ranks
from tiersim.core.units import fmt_bytes
from tiersim.state.buffers import offload_gradient_buffer_bytes
from tiersim.state.classes import PER_PARAMETER
from tiersim.state.context import gathered_kv_bytes
from tiersim.state.inventory import Inventory, rank_matrices, stage_layers
from tiersim.state.model import Transformer, UnitKind
from tiersim.state.resolved import Resolved, resolve
from tiersim.state.zeropp import secondary_weight_bytes


def split_note(s: Scenario, inv: Inventory) -> str:
    """Four lines: the whole model column, then per GPU's parameter classes, activations and
    workspace."""
    r = resolve(s)
    layers = sum(u.count for u in r.units if u.kind is UnitKind.LAYER)
    return "\n".join(
        [
            "whole model: the model's state before any split (one replica; activations: all "
            f"{layers} layers, one micro-batch, nothing divided).",
            "per GPU: one GPU's share, class by class:",
            f"  {', '.join(PER_PARAMETER)}: {_parameter_split(r, inv)}; {_data_sharding(s, inv)}.",
            *_zero1_gradients(inv),
            *_hpz_weights(r, inv),
            *_fsdp2_gradients(r),
            f"  activations: {_activation_split(r, inv, layers)}.",
            f"  workspace: {_workspace(r)}.",
        ]
    )


# the row of the whole 16-bit gradients DeepSpeed ZeRO-1's GPU keeps beside the host's partition
GPU_GRADIENTS = "gradients (GPU)"


def _zero1_gradients(inv: Inventory) -> list[str]:
    """DeepSpeed ZeRO-1 with its CPU optimizer: its gradients' two places (zero1_offload.py)."""
    whole = inv.per_gpu.gpu_gradients
    if not whole:
        return []
    part = fmt_bytes(inv.per_gpu["gradients"])
    return [
        f"  gradients (DeepSpeed ZeRO-1, CPU optimizer): the host holds the rank's partition "
        f"({part}), written once a step at the accumulation boundary (fp32 there); the GPU "
        f"accumulates the whole 16-bit gradients ({fmt_bytes(whole)}, its row "
        f"{GPU_GRADIENTS!r}, in the total and the GPU tier's resident) (stage_1_and_2.py: "
        "docs/memory.md)."
    ]


def _hpz_weights(r: Resolved, inv: Inventory) -> list[str]:
    """DeepSpeed ZeRO++ hpZ: the weights' secondary partition beside ZeRO-3's (state/zeropp.py)."""
    h = hpz_ranks(r.execution.training, r.execution.parallel)
    if h <= 1:
        return []
    mats = [m for unit in rank_matrices(r, inv.stage) for m in unit]
    extra = fmt_bytes(secondary_weight_bytes(r, mats))
    return [
        f"  weights (DeepSpeed ZeRO++ hpZ, zero_hpz_partition_size {h}): also a secondary "
        f"partition over {h} ranks, weights / {h} ({extra}), held from the first forward to "
        "the update (partition_parameters.py _partition_param_sec: docs/zero-plus-plus.md)."
    ]


def _fsdp2_gradients(r: Resolved) -> list[str]:
    """FSDP2's mixed precision: the gradient shard held in the parameters' dtype, whatever the
    reduce dtype (state/sharding.py held_gradient_precision)."""
    prec = r.execution.training.precision
    if r.execution.training.framework != "fsdp" or prec.gradients == prec.weights:
        return []
    return [
        f"  gradients (FSDP2): reduced in {prec.gradients} (training.precision.gradients: its "
        f"reduce_dtype), held in the parameters' {prec.weights}: foreach_reduce casts the "
        "reduced shard back before .grad (docs/fsdp2-memory.md)."
    ]


def _stage_share(r: Resolved, inv: Inventory) -> str:
    """'stage 0: 12 of 96 layers, with the embeddings': what pipeline parallelism leaves."""
    p = r.execution.parallel.pipeline
    held = sum(
        u.count for u in stage_layers(r.units, inv.stage, p, r.execution.parallel.stage_layers)
    )
    total = sum(u.count for u in r.units if u.kind is UnitKind.LAYER)
    beside = []
    if isinstance(r.model, Transformer):  # a generic model's layers are all it has
        beside = ["the embeddings"] if inv.stage == 0 else []
        beside += ["the output head"] if inv.stage == p - 1 else []
    with_ = f", with {' and '.join(beside)}" if beside else ""
    return f"stage {inv.stage}: {held} of {total} layers{with_}"


def _parameter_split(r: Resolved, inv: Inventory) -> str:
    """Which model-parallel splits divide the per-parameter classes (ZeRO aside)."""
    par, model = r.execution.parallel, r.model
    splits = [f"tensor {par.tensor}"] if par.tensor > 1 else []
    if par.pipeline > 1:
        splits.append(f"pipeline {par.pipeline} ({_stage_share(r, inv)})")
    text = f"split by {' x '.join(splits)}" if splits else ""
    moe = model.moe if isinstance(model, Transformer) else None
    if moe is not None and par.expert > 1:
        experts = moe.experts
        ep = f"split by expert {par.expert} ({experts // par.expert} of {experts} per GPU)"
        et = Mesh.of(par).expert_tensor
        if et != par.tensor:
            ep += f" and expert_tensor {et} (in place of tensor {par.tensor})"
        text = (
            f"{text}, the routed experts also {ep}"
            if text
            else f"the routed experts {ep}, the rest whole"
        )
    if text:
        return text
    return "not split (tensor 1, pipeline 1" + (", expert 1)" if r.model.is_moe_model else ")")


def _data_sharding(s: Scenario, inv: Inventory) -> str:
    """Which classes ZeRO shards, over how many ranks: the data-parallel group, and for the
    routed experts its data / expert part (the ranks holding the same experts)."""
    par = s.parallel
    sharded = [c for c in PER_PARAMETER if inv.sharded.get(c)]
    if not sharded:
        return f"none ZeRO-sharded (data {par.data})"
    which = ", ".join(sharded)
    mesh = Mesh.of(par)
    if mesh.context > 1 or mesh.shard != mesh.data or mesh.expert_tensor != mesh.tensor:
        return f"{which} {_mesh_sharding(mesh, inv)}"
    if par.data == 1:
        return f"{which} ZeRO-sharded over data 1, so whole"
    text = f"{which} ZeRO-sharded over data {par.data}"
    if inv.experts_per_gpu is not None and par.expert > 1:
        ranks = mesh.expert_shard_ranks  # data / expert here
        text += f" (the routed experts' over data / expert = {par.data} / {par.expert} = {ranks})"
    return text


def _mesh_sharding(mesh: Mesh, inv: Inventory) -> str:
    """The sharding group said by its mesh axes: data x context (frameworks shard over every
    rank that saw other tokens), HSDP's shard group, the routed experts' expert-data group."""
    group = f"data {mesh.data}"
    if mesh.shard != mesh.data:
        group = f"shard_group {mesh.shard} (HSDP: {mesh.replicate} replicas of it)"
    if mesh.context > 1:
        group += f" x context {mesh.context} = {mesh.dense_shard_ranks} ranks"
    text = f"ZeRO-sharded over {group}"
    if inv.experts_per_gpu is not None and mesh.expert > 1:
        text += f" (the routed experts' over their expert_data group, {mesh.expert_shard_ranks})"
    return text


def inflight_text(inv: Inventory) -> str:
    """'4 micro-batches in flight'; interleaved chunks hold different counts, and the
    inventory's figure is their mean over the stage's layers: one decimal, said so."""
    n = inv.inflight_microbatches
    if n == int(n):
        return f"{n:g} {'micro-batch' if n == 1 else 'micro-batches'} in flight"
    return f"{n:.1f} micro-batches in flight (a mean over the stage's model chunks' layers)"


def _activation_split(r: Resolved, inv: Inventory, layers: int) -> str:
    """Activations as the inventory counts them: the stage's layers times the micro-batches
    it holds in flight, divided by tensor parallelism where the tensors split."""
    par, recompute = r.execution.parallel, r.execution.training.recompute
    held = sum(u.count for u in stage_layers(r.units, inv.stage, par.pipeline, par.stage_layers))
    counted = f"stage {inv.stage}'s {held} of {layers} layers x {inflight_text(inv)}"
    if par.tensor == 1:
        divided = "not divided"
    elif recompute == "selective_op":  # state/op_recompute.py
        divided = (
            f"divided by tensor {par.tensor} but w2's output, kept whole on every rank (the "
            "partial sum before its reduction, as torchtitan's op-level policy saves it)"
        )
    elif not isinstance(r.model, Transformer) or par.sequence:
        divided = f"divided by tensor {par.tensor}"
    elif recompute == "full":  # the kept layer input is replicated unless sequence-parallel
        divided = f"not divided by tensor {par.tensor} (full recompute's layer inputs are whole)"
    else:
        divided = (
            f"the split tensors divided by tensor {par.tensor}, the rest whole "
            "(no sequence parallelism)"
        )
    c = par.context
    if c > 1:
        how = {"ring": "a ring", "all_gather": "all-gather", "all_to_all": "all-to-all"}
        divided += (
            f", and by context {c} (each rank's {r.execution.seq_len // c:,} of "
            f"{r.execution.seq_len:,} tokens; K/V by {how[par.context_comm]})"
        )
    return f"{counted}, {divided}; neither ZeRO nor expert parallelism divides them"


def _workspace(r: Resolved) -> str:
    """The workspace is each GPU's own buffers; only ZeRO-Offload's gradient buffer follows the
    tensors (the largest one each column holds), so tensor parallelism shrinks it."""
    text = "not split (training.workspace and the framework's buffers, one GPU's in both columns"
    gathered = gathered_kv_bytes(r, r.model)
    if gathered:
        text += f"; context_comm all_gather adds one layer's gathered K/V, {gathered:,.0f} B"
    if r.execution.parallel.tensor > 1 and offload_gradient_buffer_bytes(r.execution, 1):
        return f"{text}; ZeRO-Offload's gradient buffer is the largest tensor each column holds)"
    return f"{text})"
