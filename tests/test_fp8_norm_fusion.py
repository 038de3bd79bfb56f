"""Transformer Engine's LayerNormLinear under FP8 (delayed scaling, Megatron's implementation):
the norm writes QKV's and FC1's FP8 inputs itself, and the backward transposes them for the
weight gradient (tiersim.workload.fp8). Expected values by hand."""

from __future__ import annotations

import pytest
from conftest import published

from tiersim.config.fp8 import Fp8
from tiersim.workload.fp8 import layer_quantize_bytes, norm_fused, quantize_bytes

# (M, N, K): QKV, attention projection, FC1, FC2 of a toy layer
LINEARS = [(8, 6, 4), (8, 4, 2), (8, 10, 4), (8, 4, 5)]


def test_unfused_casts_every_input():
    # inputs 8·4 + 8·2 + 8·4 + 8·5 = 120; weights (24 + 8 + 40 + 20) / 2 = 46;
    # output gradients 8·(6 + 4 + 10 + 4) = 192; delayed: 4 B a value
    assert quantize_bytes(Fp8(recipe="delayed"), LINEARS, 2) == (4 * (120 + 46), 4 * 192)


def test_norm_fed_inputs_are_transposed_in_backward_instead():
    # QKV's and FC1's inputs (8·4 + 8·4 = 64) not cast: forward 4·(16 + 40 + 46) = 408;
    # backward 4·192 + their FP8 transposes 2·64 = 896
    assert quantize_bytes(Fp8(recipe="delayed"), LINEARS, 2, True) == (408, 896)


def test_only_te_delayed_scaling_under_megatron_fuses():
    assert norm_fused(Fp8(recipe="delayed"), "megatron")
    assert not norm_fused(Fp8(recipe="tensorwise"), "megatron")
    assert not norm_fused(Fp8(recipe="delayed"), "huggingface")
    assert not norm_fused(None, "megatron")


@pytest.fixture(scope="module")
def llama2_7b():
    return published("nemo2407-llama2-7b-8gpus.yaml")


def test_llama2_7b_layer(llama2_7b):
    # 4096 tokens, h 4096, q = kv = 4096, FC1 2 x 11008, grad_accumulation 16:
    # QKV (4096, 12288, 4096), proj (4096, 4096, 4096), FC1 (4096, 22016, 4096),
    # FC2 (4096, 4096, 11008); e = 4096·4096 = 16,777,216 per norm
    linears = [(4096, 12288, 4096), (4096, 4096, 4096), (4096, 22016, 4096), (4096, 4096, 11008)]
    e = 4096 * 4096
    # forward: cast proj's and FC2's inputs 4096·(4096 + 11008) = 61,865,984 and the weights
    # 4096·49408 / 16 = 12,648,448, 4 B each = 298,057,728; the two norms' FP8 write saves
    # 2·16,777,216: 264,503,296 B
    # backward: output gradients 4096·42496 = 174,063,616 x 4 = 696,254,464, plus the two
    # FP8 transposes 2 B x 2·16,777,216 = 67,108,864: 763,363,328 B
    assert layer_quantize_bytes(llama2_7b, linears, e) == (264_503_296, 763_363_328)
