"""torchtitan's op-level selective activation checkpointing (`training.recompute: selective_op`,
torchtitan's default `activation_checkpoint`, `SelectiveAC`): what a layer keeps for backward,
and what its backward recomputes.

The policy, as torchtitan 0.3.0 writes it (PyPI wheel, torchtitan/distributed/
activation_checkpoint.py, `SelectiveAC._wrap_block` and `_get_default_save_ops`): each
transformer block is wrapped in a non-reentrant checkpoint (early_stop false) whose
`create_selective_checkpoint_contexts` policy saves the output of every op in its save list -
the partitioner's compute-intensive ops (aten.mm, the CUDA flash and efficient SDPA kernels,
...), the cuDNN, math and overrideable SDPA kernels, flex and varlen attention, aten.max (FP8's
amax), the functional reduce_scatter_tensor and all_to_all_single - except every second mm (or
aten.linear): a counter per block and forward counts them and `mm_count % 2 == 0` is
recomputed. Everything else (norms, rotary, SiLU, the product, residual adds, all-gathers,
all-reduces) is recomputed in backward.

torchtitan 0.3.0's Llama 3 block projects q, k and v with one fused linear (`FusedQKVLinear`,
`fuse_qkv=True` in every llama3 config) and runs five mms in this order: wqkv, wo, w1, w3, w2
(four without a gate: wqkv, wo, w1, w2). Saved: the 1st, 3rd and 5th (wqkv's, w1's and w2's
outputs); recomputed: wo and w3. (Older torchtitan, three projections wq, wk, wv and seven mms,
saved wq, wv, w1 and w2: what this module counted before, docs/issue38-status.md.) Under
tensor parallelism the policy sees DTensor ops: a column-parallel linear's output is the
rank's 1/t, a row-parallel one's (wo, w2) the whole T x h partial sum on every rank, and with
sequence parallelism the reduce-scatter after each row-parallel linear is saved too (1/t of
T x h).

A layer keeps (T = s·b tokens, dt the compute precision's bytes): its input (the checkpoint's
argument, dt·T·h, the layer_inputs of full recompute), the saved mms' outputs, and SDPA's
outputs (dt·T·a·e and the fp32 log-sum-exp, as the torchtitan accounting counts them,
state/activations_titan.py). Its backward reruns the forward but for the saved ops, each
cache entry freed once the rerun has used it (early_stop false: the rerun goes to the block's
end): the layer's backward then holds its input and its whole `recompute: none` set, as under
full recompute, measured on the CPU to the byte (tests/test_op_recompute.py: the backward's
peak under the policy equals the one without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item, divided
from tiersim.state.activations_titan import titan_layer

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape as Transformer

# SDPA's outputs as the torchtitan accounting names them (activations_titan.titan_layer)
SDPA_OUTPUTS = ("output (wo's input)", "logsumexp (fp32)")


def layer_matmuls(m: Transformer) -> list[tuple[str, int, int, bool]]:
    """The block's mms in forward order: (linear, output width, input width, row-parallel)."""
    h, q, kv, f = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn_hidden
    mlp = [("w1", f, h, False), ("w3", f, h, False)] if m.gated_mlp else [("w1", f, h, False)]
    return [
        ("wqkv", q + 2 * kv, h, False),  # FusedQKVLinear: one mm for q, k and v
        ("wo", h, q, True),
        *mlp,
        ("w2", h, f, True),
    ]


def saved(count: int) -> bool:
    """torchtitan's rule: the count-th mm of a block (from 1) is saved unless count is even."""
    return count % 2 != 0


def recomputed_matmuls(m: Transformer) -> list[tuple[str, int, int, bool]]:
    return [mm for n, mm in enumerate(layer_matmuls(m), start=1) if not saved(n)]


GROUP = {"wqkv": "attention_inputs"}


def op_items(
    m: Transformer, s: int, b: int, acc: Accounting, tensor: int = 1, sequence: bool = False
) -> list[Item]:
    """What one layer keeps under the policy, bytes for the whole tensor-parallel group (a
    row-parallel output is whole on each of the t ranks: t·dt·T·h)."""
    dt, t = acc.compute_bytes, s * b
    items = [Item("layer_inputs", "layer input (checkpoint argument)", dt * t * m.hidden, False)]
    for n, (name, width, _, row) in enumerate(layer_matmuls(m), start=1):
        if not saved(n):
            continue
        group = GROUP.get(name, "attention_core" if name == "wo" else "mlp")
        whole = tensor if row else 1  # the partial sum before its reduction, on every rank
        items.append(Item(group, f"{name} output", whole * dt * t * width, True))
    items += [i for i in titan_layer(m, s, b, acc) if i.name in SDPA_OUTPUTS]
    if tensor > 1 and sequence:  # each row-parallel linear's reduce-scatter output
        items.append(Item("mlp", "wo and w2 reduce-scatter outputs", 2.0 * dt * t * m.hidden, True))
    return items


def op_saved_bytes(
    m: Transformer, s: int, b: int, acc: Accounting, tensor: int = 1, sequence: bool = False
) -> float:
    """Bytes one layer keeps for backward on one GPU under the policy."""
    return divided(op_items(m, s, b, acc, tensor, sequence), tensor, sequence)


def op_working_bytes(
    m: Transformer, s: int, b: int, acc: Accounting, tensor: int = 1, sequence: bool = False
) -> float:
    """The recompute working set of one layer's backward on one GPU: the rerun forward holds
    the layer's whole `recompute: none` set while the cache's entries, each consumed by the
    rerun, are freed (torchtitan's early_stop false: the rerun runs to the block's end), so
    the layer's backward holds its input and the none set, as under full recompute: the none
    set less what the cache held (never below nothing)."""
    dt, t = acc.compute_bytes, s * b
    layer_input = divided([Item("layer_inputs", "", dt * t * m.hidden, False)], tensor, sequence)
    cache = op_saved_bytes(m, s, b, acc, tensor, sequence) - layer_input
    return max(0.0, divided(titan_layer(m, s, b, acc), tensor, sequence) - cache)
