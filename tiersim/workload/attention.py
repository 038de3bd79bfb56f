"""Attention's core (scores, softmax, the two batched products) as `training.attention_kernel`
runs it on a GPU, for the kernel time model (tiersim/workload/kernels.py).

- eager: the s x k scores materialised in HBM (Megatron-LM's fused scale-mask-softmax,
  transformers' eager attention): QK^T and PV over all s·k scores, the backward's four
  products (dQ, dK, dP, dV) twice the forward's, and the kernels' bytes per score (kernels.py).
- flash (FlashAttention-2, Dao 2023): S and P stay on chip, no score byte reaches HBM, forward
  or backward; the backward recomputes S = QK^T, five products against the forward's two, 2.5x
  its FLOPs (FlashAttention-2 §4.1 counts it so). A causal (or sliding-window) kernel computes
  only the (M x N) tiles that hold a score the mask keeps: M = 128 query rows, N = 64 keys,
  FlashAttention-2's forward tile for A100 and H100 without dropout at head_dim 96-256
  (csrc/flash_attn/src/flash_fwd_launch_template.h, run_mha_fwd_hdim128; 128 x 128 at
  head_dim 64). With N dividing M the share is (n + 1) / (2n), n = ceil(s / 128) row blocks,
  for either tile, and the backward's 64 x 128 (flash_bwd_launch_template.h) gives the same:
  one share serves both passes. A tile on the diagonal counts whole (it is computed, masked).
- sdpa, PyTorch's scaled_dot_product_attention (aten/src/ATen/native/transformers): with no
  mask and `is_causal=True` it dispatches to its FlashAttention-2 kernel (bf16/fp16, sm80+):
  as flash. An explicit `attn_mask` rules the flash backend out (sdp_utils_cpp.h,
  check_for_attn_mask: "Flash Attention does not support non-null attn_mask"), so it runs
  the memory-efficient kernel, which computes every tile of the s x s scores (no causal
  skip), recomputes in backward like flash, and reads the mask as an additive bias: the
  boolean mask is first converted to the compute dtype (attention.cpp,
  convert_boolean_attn_mask: read 1 B, write 2 per mask element), then read by the forward
  (2 B) and by the backward (2 B). The mask is b x 1 x s x s, shared by the heads (their
  thread blocks run side by side, grid x = query blocks, y = heads, and meet it in L2:
  counted once per mask element, an assumption).
  When is there a mask? transformers' `sdpa_mask` (masking_utils.py, _ignore_causal_mask_sdpa)
  passes none, and `is_causal=True`, only when the batch has no padding and no sliding window;
  tiersim assumes `implementation: huggingface` batches are padded (the data collators pad to
  a fixed length, as the Ma and Wang 2025 runs' finetune_llama.py pads Alpaca to 512 tokens),
  so huggingface + sdpa takes the memory-efficient kernel; megatron + sdpa (a model that calls
  SDPA with `is_causal=True` on unpadded sequences) the flash one. A sliding-window layer needs
  a mask under SDPA either way (it has no window argument). Not counted: transformers'
  `repeat_kv` copies of K and V to every head beside a mask (hidden-size bytes, not per score),
  the mask's construction (once per model forward), flash_attention_2's unpadding (it would
  shorten the sequences; they are taken as padded to s).
"""

from __future__ import annotations

from functools import lru_cache

from tiersim.core.records import record

FLASH_TILE = (128, 64)  # FlashAttention-2's forward tile: query rows x keys (see above)
FUSED_BACKWARD = 2.5  # backward products over forward's: 5 (S recomputed, dV, dP, dQ, dK) / 2
EAGER_BACKWARD = 2.0  # dQ, dK (QK^T's shapes) and dP, dV (PV's)
MASK_CONVERT_B, MASK_READ_B = 3.0, 2.0  # per mask element: bool -> bf16; the bias read


@record
class AttentionCore:
    """One layer's attention core relative to the eager s x k products: the share of them
    computed, the backward's products over the forward's, and bytes per score (e_a) and per
    mask element (e_a / heads on this GPU) forward and backward."""

    computed: float
    backward_products: float
    score_bytes: tuple[float, float]
    mask_bytes: tuple[float, float] = (0.0, 0.0)


def flash_computed(seq: int, keys: int, window: int | None) -> float:
    """Share of the s x k scores a causal FlashAttention-2 kernel computes: the area of its
    tiles (clipped to the s x s scores) that hold a kept score, over s·k; `window` keys to
    the left (the query's own included) or all before it (None)."""
    return _tile_area(seq, window) / (seq * keys)


@lru_cache(maxsize=256)
def _tile_area(seq: int, window: int | None) -> int:
    rows_per, cols_per = FLASH_TILE
    area = 0
    for first in range(0, seq, rows_per):
        last = min(seq, first + rows_per) - 1
        lo = 0 if window is None else max(0, first - window + 1)  # the first row's first key
        col_lo = (lo // cols_per) * cols_per
        col_hi = min(seq, (last // cols_per + 1) * cols_per)  # causal: up to the last row
        area += (last - first + 1) * (col_hi - col_lo)
    return area


def attention_core(
    kernel: str,
    implementation: str,
    seq: int,
    keys: int,
    window: int | None,
    eager_bytes: tuple[float, float],
) -> AttentionCore:
    """The core as `kernel` runs it under `implementation`'s masking (module docstring);
    `window` is the layer's sliding window (None: full causal attention), `eager_bytes` the
    eager kernels' bytes per score."""
    if kernel == "eager":
        return AttentionCore(1.0, EAGER_BACKWARD, eager_bytes)
    masked = kernel == "sdpa" and (implementation == "huggingface" or window is not None)
    if not masked:
        return AttentionCore(flash_computed(seq, keys, window), FUSED_BACKWARD, (0.0, 0.0))
    dense = seq / keys  # every tile of the s x s scores, the window's too
    return AttentionCore(
        dense, FUSED_BACKWARD, (0.0, 0.0), (MASK_CONVERT_B + MASK_READ_B, MASK_READ_B)
    )
