"""Megatron-Core's all-gather of the fused QKV output when the tensor-parallel size exceeds
the KV heads (t > k, t a multiple of k: config/layout_checks.py refuses the rest; every
other framework's tensor parallelism refuses or fails on it, config/kv_head_split.py).

From NVIDIA/Megatron-LM @ 00caa53af30912914981c86f39db123961678bbd:
- megatron/core/transformer/attention.py, `SelfAttention.__init__`: `linear_qkv` is one
  column-parallel linear of (a + 2k)·e output columns, `gather_output=False`, split evenly
  over the t ranks (no weight is replicated: each rank holds (a + 2k)·e/t columns, as
  tiersim's parameters split them);
- `SelfAttention.get_query_key_value_tensors`, the `num_query_groups < world_size` branch:
  `all_gather_last_dim_from_tensor_parallel_region(mixed_qkv)` assembles the whole
  [s, b, (a + 2k)·e] output on every rank of the tensor group, then each rank slices out its
  query group (one KV head and a/k query heads) and keeps a/t of the query heads;
- megatron/core/tensor_parallel/mappings.py, `_AllGatherFromTensorParallelRegion`: forward
  `_gather_along_last_dim` (one `all_gather_into_tensor` on the tensor group), backward
  `_reduce_scatter_along_last_dim` (one `reduce_scatter_tensor` of the whole gradient).

So per layer and micro-batch: forward one all-gather, backward one reduce-scatter, each of
the whole tensor B = s/c · b · (a + 2k)·e at the activations' precision (a context rank's
s/c tokens; the linear's output holds the whole sequence under sequence parallelism too).
Both are plain autograd collectives on the compute stream: blocking, whatever
`parallel.overlap_tensor_forward/backward` say (those are the linears' own collectives).
Full recompute reruns the forward and with it the all-gather (its share of the layers);
Megatron's selective recompute checkpoints the attention core only, after the gather.
Latent attention (MLA) has its own module and no such branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES
from tiersim.workload.comms import Comm, comm, joined, redone_share

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def gathers_qkv(r: Resolved, model) -> bool:
    """Whether the layers' attention takes Megatron-Core's gather path: t > kv heads under
    Megatron-Core's tensor parallelism (config/kv_head_split.py, which refuses the layout
    under every other framework's), read once into the accounting."""
    return r.accounting.kv_heads_held > 0 and getattr(model, "mla", None) is None


def qkv_bytes(r: Resolved, model) -> float:
    """The gathered QKV output, s/c · b · (a + 2k)·e at the activations' precision."""
    ex = r.execution
    act = PRECISION_BYTES[ex.training.precision.weights]
    tokens = ex.seq_len // ex.parallel.context
    width = (model.heads + 2 * model.kv_heads) * model.head_dim
    return float(tokens * ex.training.micro_batch_size * width * act)


def qkv_gather_comms(r: Resolved, model) -> tuple[Comm | None, Comm | None]:
    """(forward, backward) of one layer and micro-batch, both blocking (module docstring);
    (None, None) where t <= kv heads."""
    if not gathers_qkv(r, model):
        return None, None
    buffer = qkv_bytes(r, model)
    fwd = comm(r, "tp qkv gather", "tensor", "all_gather", buffer)
    scatter = comm(r, "tp qkv gather", "tensor", "reduce_scatter", buffer)
    redo = redone_share(r)
    again = comm(r, "tp qkv gather", "tensor", "all_gather", buffer, redo) if redo else None
    return fwd, joined("tp qkv gather", [scatter, again])
