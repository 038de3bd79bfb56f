"""oneDNN's matmul scratchpad where a CPU with AVX-512 BF16 and no AMX runs a bf16 GEMM
(`brg_matmul:avx512_core_bf16`, the route aten gives a bf16 `mm` there: Accounting.cpu_gemm
"onednn-avx512"), one thread, as PyTorch's allocator sees it (ideep allocates the primitive's
scratchpad through c10 inside the `mm`). Pure arithmetic: nothing here imports PyTorch, so the
state modules (state/muon_sharded.py, state/loss_memory.py) can count it.

From oneDNN's source (src/cpu/x64/matmul/brgemm_matmul_utils.cpp: `init_scratchpad`,
`init_aux_values`, `compute_blocking_heuristic_avx512`) for a product [M, K] x [K, N], A not
plain or transposed, per thread:

- the batch elements (`key_brgemm_primitive_batch`): 1,024 B with their alignment, measured;
- B's VNNI copy (`key_brgemm_primitive_buffer_b`, `buffer_b_per_thread_sz`): 2 B x LDB x
  K_blk rounded up to the VNNI step (32), LDB the default N block 64 whatever N,
  K_blk = min(K, 512) (K > 1024: 1024, `use_extended_k_blk` for a plain A);
- the fp32 accumulator (`key_brgemm_primitive_buffer`, `buffer_c_per_thread_sz`): 4 B x
  M_blk x N_blk, N_blk = min(N, 64), M_blk = M up to 256 (the heuristic's `max_m_blk`; above
  it, 256 where it divides M, else a block this module does not derive);
- A transposed (a weight's gradient, dYᵀ X): A's copy (`key_brgemm_primitive_buffer_a`,
  `buffer_a_per_thread_sz`): 2 B x M_blk x LDA, LDA = K rounded up to a cache line of 32
  values, and 128 B more (measured); derived for K up to 256 (at LDA 512 and powers of 2
  oneDNN pads it, and K above 1,024 keeps the 512 block: not derived).

aten sends a product to oneDNN only above 16³ (m·k·n > 4,096, `mkldnn_gemm_min_size`); at or
below it aten's own gemm allocates nothing. Checked on this kernel (torch 2.13.0, oneDNN 3.12,
Intel Xeon with avx512_bf16 and no AMX), to the byte: 2,080 products with A plain (m 2..512,
k 1..1,500, n 2..256, B plain and transposed) and 1,686 with A transposed (m 2..1,024, k up to
256); tests/test_cpu_gemm_workspace.py checks the grids on the kernel where the route is this.
"""

from __future__ import annotations

ONEDNN_MIN_WORK = 16 * 16 * 16  # aten's checksize: at or below it aten's own gemm runs
BATCH_BYTES = 1024  # the brgemm batch elements, with their alignment (measured)
WEI_N_BLK = 64  # get_default_n_block: the N block of B's copy (its LDB)
VNNI_K = 32  # data_type_vnni_simd_elems<avx512_core>(bf16): K rounded up to it
MAX_M_BLK = 256  # compute_blocking_heuristic_avx512's max_m_blk
A_COPY_EXTRA = 128  # A's copy beyond its M_blk x LDA values (measured, its alignment)
A_COPY_MAX_K = 256  # A transposed: checked up to K = 256 (LDA below the pow-2 padding at 512)


def _ceil_to(x: int, step: int) -> int:
    return -(-x // step) * step


def scratchpad(m: int, k: int, n: int, a_transposed: bool = False) -> int | None:
    """Bytes oneDNN's avx512_core_bf16 matmul allocates through c10 for a bf16 [m, k] x [k, n]
    product on one thread; None where no rule is derived here (M above 256 and not a multiple
    of it, N = 1; A transposed with K above 256, or with K = 1 and M above 256)."""
    if m * k * n <= ONEDNN_MIN_WORK:
        return 0
    # a transposed A with one row or one column matches the plain layout first
    # (set_or_check_tags; `treat_transposed_A_as_plain` for M = 1): no copy; measured so for
    # one column up to M = 256 only (above, at 512 and more, a copy again: not derived)
    if a_transposed and k == 1 and m > MAX_M_BLK:
        return None
    a_transposed = a_transposed and k > 1 and m > 1
    if n < 2 or (m > MAX_M_BLK and m % MAX_M_BLK) or (a_transposed and k > A_COPY_MAX_K):
        return None
    k_blk = 1024 if k > 1024 else min(k, 512)
    m_blk = min(m, MAX_M_BLK)
    b_copy = 2 * WEI_N_BLK * _ceil_to(k_blk, VNNI_K)
    accumulator = 4 * m_blk * min(n, WEI_N_BLK)
    a_copy = 2 * m_blk * _ceil_to(k, VNNI_K) + A_COPY_EXTRA if a_transposed else 0
    return BATCH_BYTES + b_copy + accumulator + a_copy


def known_scratchpad(m: int, k: int, n: int, a_transposed: bool = False) -> int:
    """`scratchpad`, and where no rule is derived a bound above it (M_blk 256, K_blk 1,024,
    A's copy as wide): for the timeline, which cannot leave a GEMM out."""
    got = scratchpad(m, k, n, a_transposed)
    if got is not None:
        return got
    k_blk = _ceil_to(min(k, 1024), VNNI_K)
    a_copy = 2 * MAX_M_BLK * (k_blk + VNNI_K) + A_COPY_EXTRA if a_transposed else 0
    return BATCH_BYTES + 2 * WEI_N_BLK * k_blk + 4 * MAX_M_BLK * WEI_N_BLK + a_copy
