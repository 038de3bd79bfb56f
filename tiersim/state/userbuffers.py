"""Transformer Engine's userbuffers for tensor-parallel communication overlap
(`parallel.overlap_tensor_forward` under `training.framework: megatron`: Megatron-LM's
`--tp-comm-overlap`, NeMo's `ub_tp_comm_overlap`), held for the whole run outside PyTorch's
caching allocator (docs/nemo-memory.md).

- The shape: NeMo's `initialize_ub_func` (megatron_gpt_model.py) and Megatron-LM's
  `_initialize_tp_communicators` pass `[seq_length * micro_batch_size // context_parallel_size,
  hidden_size]`.
- The buffers: TE's `initialize_ub` (transformer_engine/pytorch/module/base.py at 0004dbd0)
  adds one communicator for each of ten GEMMs, ring_exchange `qkv_fprop`, `fc1_fprop`,
  `proj_dgrad`, `fc2_dgrad`, pipeline `proj_fprop`, `fc2_fprop`, bulk `qkv_dgrad`,
  `qkv_wgrad`, `fc1_dgrad`, `fc1_wgrad`, each from a sample buffer of that shape, in uint8
  (1 B) for the all-gather buffers `fp8_buf` = qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop,
  fc1_dgrad, fc2_dgrad under FP8 and in bf16 (2 B) otherwise.
- Where they live: each communicator's constructor "Allocate[s] and register[s] extra
  userbuffers" of the sample's bytes, `register_user_buffer_collective(&_ubuf_ptr, ubuf_bytes,
  _ub_comm, true)` (the driver's allocation, not PyTorch's), and wraps it with
  `torch::from_blob`; the sample itself goes back to the allocator's cache.

Not counted: later TE versions' 2t - 1 chunks for a reduce-scatter overlapped by ring exchange
(where a config asks for one) and the communicators' flags. `initialize_ub`'s cuBLAS
workspace repeated for three streams (3 x 32 MiB on Hopper) is in `training.workspace`
(config/kernel_workspace.py).
"""

from __future__ import annotations

from tiersim.state.resolved import Resolved

UB_NAME = "TE userbuffers (tp_comm_overlap)"
ALL_GATHER_BUFFERS = 6  # fp8_buf: uint8 under FP8
OTHER_BUFFERS = 4  # proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad: bf16
BF16 = 2


def userbuffer_bytes(r: Resolved) -> int:
    """Bytes of TE's ten userbuffers on one GPU (0 without TE's tensor-parallel overlap)."""
    ex, par = r.execution, r.execution.parallel
    if ex.training.framework != "megatron" or not par.overlap_tensor_forward or par.tensor < 2:
        return 0
    tokens = ex.seq_len * ex.training.micro_batch_size // par.context
    values = tokens * (getattr(r.model, "hidden", None) or 0)  # none for a generic model
    gathered = 1 if ex.training.fp8 is not None else BF16
    return values * (ALL_GATHER_BUFFERS * gathered + OTHER_BUFFERS * BF16)


def userbuffer_source(r: Resolved) -> str:
    """Where the figure comes from, as the report's outside terms say it."""
    fp8 = r.execution.training.fp8 is not None
    kinds = "6 uint8 + 4 bf16" if fp8 else "10 bf16"
    return f"TE initialize_ub: {kinds} buffers of [seq x micro-batch / context, hidden]"
