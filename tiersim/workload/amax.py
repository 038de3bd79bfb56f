"""Delayed scaling's amax reduction (`training.fp8.recipe: delayed`): what Transformer
Engine's `DelayedScaling` runs once per forward and once per backward of each
`fp8_autocast` region, which Megatron-Core opens around each model chunk's transformer block
(megatron/core/transformer/transformer_block.py: `fp8_autocast(fp8_group=
parallel_state.get_amax_reduction_group(with_context_parallel=True))`, the tensor x data x
context ranks of the stage).

At the outermost `fp8_autocast` exit (forward) and at the end of the region's backward, TE's
`FP8GlobalStateManager.reduce_and_update_fp8_tensors` concatenates the region's latest amaxes
(fp32: 3 a GEMM forward, its input, weight and output; 2 backward, the output's and the
input's gradients; 4 GEMMs a layer: QKV, projection, FC1, FC2) and runs one blocking MAX
all-reduce over that group (`async_op=False`), then one fused kernel that rolls each amax
history and computes the scales (`amax_and_scale_update`): it reads and writes the history
(H x n fp32, H = 1024, NeMo's `fp8_amax_history_len` in its GPT/Llama configs,
examples/nlp/language_modeling/conf/megatron_gpt_config.yaml) and reads the amax and writes
the scale and its inverse (20 B per amax).

The all-reduce carries a few hundred to a few thousand bytes: latency-bound. NCCL runs such
messages on its tree (a chain inside a node, a double binary tree across nodes), timed with
the collectives model's tree all-reduce per level (tiersim/hardware/collectives.py,
`tree_all_reduce_s`: 2·bytes/bw + 2·ceil(log2 n) hops): the group's members in one node at
the NVLink hop latency, its nodes at the network's.

Not here: current (tensorwise) scaling keeps no amax history and reduces nothing per
region; under sequence parallelism TE reduces the amax of a column-parallel linear's input
(forward) and a row-parallel linear's output gradient (backward) over the tensor group, one
small all-reduce per such GEMM (transformer_engine/pytorch/module/linear.py,
layernorm_linear.py, layernorm_mlp.py: `with_amax_reduction`, `amax_reduction_group =
self.tp_group`): not priced. Rowwise, blockwise and MXFP8 scale from each tensor's own
values (no reduction).
"""

from __future__ import annotations

import dataclasses
import math

from tiersim.config.mesh import group_placement
from tiersim.hardware.collectives import tree_all_reduce_s
from tiersim.state.resolved import Resolved
from tiersim.workload.unit import Unit

LAYER_GEMMS = 4  # QKV, attention projection, FC1, FC2
FWD_AMAXES, BWD_AMAXES = 3, 2  # per GEMM: input, weight, output; output and input gradients
AMAX_B = 4  # fp32
HISTORY = 1024  # NeMo's fp8_amax_history_len
UPDATE_B = 20  # per amax beside its history: the amax read, scale and scale_inv read, written


def _group(r: Resolved) -> tuple[int, int]:
    """(members in one node, nodes) of the amax group: tensor x context x data, contiguous."""
    par = r.execution.parallel
    size = par.tensor * par.context * par.data
    return group_placement(size, 1, r.machine.network.gpus_per_node)


def reduction_s(r: Resolved, amaxes: int) -> float:
    """One reduce-and-update of `amaxes` amaxes: the MAX all-reduce over the amax group (each
    level's tree) and the update kernel's bytes at HBM bandwidth x memory efficiency."""
    net, gpu = r.machine.network, r.machine.gpu
    per_node, nodes = _group(r)
    nbytes = float(AMAX_B * amaxes)
    inside = tree_all_reduce_s(nbytes, per_node, net.intra_node_bandwidth, net.intra_node_latency)
    across = tree_all_reduce_s(nbytes, nodes, net.inter_node_bandwidth, net.inter_node_latency)
    hbm = r.machine.tiers[gpu.memory]
    bw = min(hbm.read_bw, hbm.write_bw) * gpu.memory_efficiency
    update = (2 * AMAX_B * HISTORY + UPDATE_B) * amaxes / bw
    return inside + across + update


def per_layer_s(r: Resolved, stage_layers: int) -> tuple[float, float]:
    """A layer's share of the stage's reductions per micro-batch, forward and backward: the
    stage's v chunks each reduce once a pass, over the amaxes of its layers; spread evenly over
    the stage's `stage_layers` layers. (0, 0) without delayed scaling."""
    fp8 = r.execution.training.fp8
    if fp8 is None or fp8.recipe != "delayed" or stage_layers < 1:
        return 0.0, 0.0
    chunks = r.execution.parallel.virtual_pipeline
    per_chunk = math.ceil(stage_layers / chunks)
    fwd = reduction_s(r, FWD_AMAXES * LAYER_GEMMS * per_chunk)
    bwd = reduction_s(r, BWD_AMAXES * LAYER_GEMMS * per_chunk)
    return chunks * fwd / stage_layers, chunks * bwd / stage_layers


def with_amax_reduction(u: Unit, share: tuple[float, float]) -> Unit:
    """A layer's unit with its share of the reductions, blocking its forward and backward
    (a layer's routed experts placed apart carry none: the rest of their layer does)."""
    if u.home is not None or share == (0.0, 0.0):
        return u
    fwd, bwd = share
    return dataclasses.replace(u, forward_s=u.forward_s + fwd, backward_s=u.backward_s + bwd)
