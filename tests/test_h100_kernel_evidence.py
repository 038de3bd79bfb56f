"""The H100 kernel table against kernel-level measurements it was not built from
(docs/h100-kernel-evidence.md, issue #39): each expectation is a published figure, cited
beside it, or arithmetic on the table's own cited figures, written out."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import scenario

from tiersim.config.fp8 import Fp8
from tiersim.hardware.kernel_tables import kernel_table
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.fp8 import quantize_bytes, quantize_slowdown
from tiersim.workload.kernels import layer_kernels

T = 1e12

# NVIDIA/cudnn-frontend benchmark/benchmark_results.csv (commit 505fcfeb): cuDNN 9.1 BF16
# SDPA, head dim 128, 16 heads, batch x sequence = 16k tokens, TFLOP/s fwd and bwd; the
# benchmark's README (benchmark/README.md, commit b7405428) locks the clocks first
# (`nvidia-smi -ac 3201,1980`, `-pl 700`, its example an H200). Backward, causal / full:
CUDNN_BWD = {  # seq: (full, causal)
    4096: (517.2529813957277, 443.6033150228602),
    8192: (530.3655776577822, 463.5408134793645),
    16384: (538.4599964919703, 497.67958736481233),
}


def test_the_cudnn_causal_backward_derivation_agrees_with_cudnns_own_causal_backward():
    # The FlashAttention-3 paper plots the backward for full masks only, so the table's
    # causal backward is the full backward x the forward's causal / full ratio
    # (kernel_tables.AttentionTable.tflops). cuDNN's own benchmark measures both masks:
    # causal / full backward 443.6 / 517.3 = 0.8576 (4k), 463.5 / 530.4 = 0.8740 (8k),
    # 497.7 / 538.5 = 0.9243 (16k). The table's ratio is FA3 Fig. 5's cuDNN forward,
    # 518 / 609 = 0.8506, 529 / 600 = 0.8817, 539 / 595 = 0.9059: -0.8 %, +0.9 %, -2.0 %.
    h100 = dataclasses.replace(kernel_table("h100-sxm"), sustained={})
    derived = {4096: 518 / 609, 8192: 529 / 600, 16384: 539 / 595}
    for seq, (full, causal) in CUDNN_BWD.items():
        bwd = h100.attention_rate("cudnn", "backward", True, 128, seq)
        bwd_full = h100.attention_rate("cudnn", "backward", False, 128, seq)
        assert bwd / bwd_full == pytest.approx(derived[seq])
        assert bwd / bwd_full == pytest.approx(causal / full, rel=0.025)


# TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst (commit 8f2e6357),
# "Worked Example: 5B Model on H200" (an H200 NVL), the 12 GEMMs of a layer with hidden
# 4096, FFN 16384, 15,872 tokens, per-layer ms, pre-quantized (the GEMM kernels alone):
# BF16 31.968, FP8 current scaling 16.785.
TE_BF16_MS, TE_FP8_MS = 31.968, 16.785
TOKENS, HIDDEN, FFN = 15872, 4096, 16384


def _layer_gemms() -> list[tuple[int, int, int]]:
    """(m, n, k) of the benchmark's 4 forward, 4 input-gradient, 4 weight-gradient GEMMs."""
    fwd = [(TOKENS, 3 * HIDDEN, HIDDEN), (TOKENS, HIDDEN, HIDDEN)]
    fwd += [(TOKENS, FFN, HIDDEN), (TOKENS, HIDDEN, FFN)]
    dgrad = [(m, k, n) for m, n, k in fwd]
    wgrad = [(k, n, m) for m, n, k in fwd]
    return fwd + dgrad + wgrad


def test_the_tables_fp8_speedup_at_tes_shapes_is_not_above_tes_measured_one():
    # Every size of these GEMMs is >= 4096, FP8's K / 2 >= 2048: BF16 bursts at its grid edge
    # 783.3 and FP8 at 738.7 or 783.3 x 1402.6 / 794.5 = 1304.1 or 1382.8, all above the
    # sustained ceilings 0.888 x 794.5 = 705.5 and 0.888 x 1402.6 = 1245.5: every GEMM runs at
    # its ceiling, so FP8's GEMM time is BF16's / (1402.6 / 794.5) = / 1.7654.
    h100 = kernel_table("h100-sxm")
    gemms = _layer_gemms()
    flops = sum(2.0 * m * n * k for m, n, k in gemms)
    # 2 x 15872 x 4096 x (12288 + 4096 + 16384) + 2 x 15872 x 16384 x 4096 = 6.3913e12 a
    # pass; x 3 passes = 19.174e12
    assert flops == pytest.approx(3 * 2 * TOKENS * HIDDEN * (3 * HIDDEN + HIDDEN + 2 * FFN))
    bf16 = sum(2.0 * m * n * k / h100.gemm_rate("bf16", m, n, k, 132) for m, n, k in gemms)
    fp8 = sum(2.0 * m * n * k / h100.gemm_rate("fp8", m, n, k, 132) for m, n, k in gemms)
    assert bf16 == pytest.approx(flops / (0.888 * 794.5 * T))  # 27.18 ms
    assert bf16 / fp8 == pytest.approx(1402.6 / 794.5)
    # TE measured 31.968 / 16.785 = 1.905 on a 600 W card: the table prices FP8's GEMMs, if
    # anything, slower against BF16 than TE's own kernels run, not faster
    assert bf16 / fp8 < TE_BF16_MS / TE_FP8_MS


# Transformer Engine's cast-transpose on an H100 SXM, FP16 in, FP8 out
# (NVIDIA/TransformerEngine pull request 101, 2023-03-14, "heuristic vector size"): 4096 x 4096
# in 51.95 us. TE 1.8.0.dev0, NeMo 24.07's, runs its NVRTC port (pull request 258).
TE_CAST_TRANSPOSE_S = 51.95e-6


def test_the_h100s_delayed_quantize_share_is_tes_measured_cast_transpose():
    # 4 B an element (2 read, the FP8 copy and its transpose 1 + 1 written): 4096 x 4096 x 4 =
    # 67,108,864 B / 51.95 us = 1.2918 TB/s; / 3.35 TB/s (the H100 SXM's HBM3) = 0.3856
    share = 4096 * 4096 * 4 / TE_CAST_TRANSPOSE_S / 3.35e12
    assert kernel_table("h100-sxm").quantize_share == {"delayed": round(share, 3)}
    # the H200 inherits it (base: h100-sxm; no H200 measurement: an assumption)
    assert kernel_table("h200-sxm").quantize_share == {"delayed": 0.386}
    assert kernel_table("b200").quantize_share == {}


def test_quantize_bytes_take_the_measured_kernels_time():
    h100 = kernel_table("h100-sxm")
    delayed, tensorwise = Fp8(recipe="delayed"), Fp8(recipe="tensorwise")
    # priced with the memory-bound bytes at memory_efficiency 0.90: weighted 0.90 / 0.386
    assert quantize_slowdown(h100, delayed, 0.90) == pytest.approx(0.90 / 0.386)
    # no measured kernel for the recipe, no table, or no FP8: as the other memory-bound kernels
    assert quantize_slowdown(h100, tensorwise, 0.90) == 1.0
    assert quantize_slowdown(None, delayed, 0.90) == 1.0
    assert quantize_slowdown(h100, None, 0.90) == 1.0
    # one 4096^3 linear, one micro-batch a step, delayed's 4 B: forward 4 x (4096^2 input +
    # 4096^2 weight) = 134,217,728 B, backward 4 x 4096^2 gradient = 67,108,864 B; x 2.5
    assert quantize_bytes(delayed, [(4096, 4096, 4096)], 1, slowdown=2.5) == (
        pytest.approx(134_217_728 * 2.5),
        pytest.approx(67_108_864 * 2.5),
    )
    assert quantize_bytes(None, [(4096, 4096, 4096)], 1, slowdown=2.5) == (0.0, 0.0)


def _llama7b(kernels: str) -> object:
    raw = {
        "name": "q",
        "model": {"preset": "llama-2-7b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "fp8": {"recipe": "delayed"}},
        "hardware": {"preset": "dgx-h100", "gpu": {"kernels": kernels}},
    }
    return layer_kernels(resolve(scenario(raw)), build_model(scenario(raw).model))


def test_a_layers_delayed_quantize_runs_at_the_cast_transposes_rate(tmp_path):
    # the same table with the share set to memory_efficiency (0.90): the old pricing
    plain = tmp_path / "plain.yaml"
    plain.write_text("base: h100-sxm\nfp8_quantize: {delayed: 0.90}\n")
    old, new = _llama7b(str(plain)), _llama7b("h100-sxm")
    # Llama 2 7B, 4096 tokens, TP 1, Megatron's implementation: TE's LayerNormLinear writes
    # QKV's and FC1's inputs in FP8 itself (tiersim/workload/fp8.py), so forward casts only the
    # projection's and FC2's inputs, 4096 x (4096 + 11008) = 61,865,984; weights 4096 x 12288 +
    # 4096 x 4096 + 4096 x 22016 + 11008 x 4096 = 202,375,168 (grad_accumulation 1); x 4 B =
    # 1,056,964,608 B. Backward: the outputs' gradients 4096 x (12288 + 4096 + 22016 + 4096) =
    # 174,063,616 x 4 = 696,254,464 B, and the norms' FP8 outputs transposed for the weight
    # gradients, 2 x 4096 x 4096 x 2 B = 67,108,864 B: 763,363,328 B. (The norms' saved byte a
    # value is the norm kernel's, at its own rate: the same in both.)
    # At 0.386 of 3.35 TB/s instead of 0.90: each byte takes 1 / 1.2931e12 - 1 / 3.015e12 s more
    extra = 1 / (0.386 * 3.35e12) - 1 / (0.90 * 3.35e12)
    assert new.forward.memory_s - old.forward.memory_s == pytest.approx(1_056_964_608 * extra)
    assert new.backward.memory_s - old.backward.memory_s == pytest.approx(763_363_328 * extra)
    assert new.forward.gemm_s == old.forward.gemm_s
