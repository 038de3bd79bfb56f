"""Megatron-Core's fused RoPE kernel (Transformer Engine's, `apply_rope_fusion`) on q and k,
priced in the layer's memory-bound kernels (tiersim.workload.kernels). Expected by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import published

from tiersim.workload.kernels import layer_kernels


@pytest.fixture(scope="module")
def llama2_7b():
    return published("nemo2407-llama2-7b-8gpus.yaml")


def test_rope_adds_4_bytes_per_q_and_k_element_each_way(llama2_7b):
    r = llama2_7b
    rope = layer_kernels(r, r.model)
    absent = layer_kernels(r, dataclasses.replace(r.model, position="none"))
    # Llama 2 7B, 4096 tokens, 32 heads and 32 kv heads of 128, TP 1:
    # e_qk = 4096 x (32 + 32) x 128 = 33,554,432 elements; x 4 B = 134,217,728 B a pass;
    # DGX H100 HBM 3.35 TB/s x memory_efficiency 0.90 = 3.015e12 B/s: 44.5166 us a pass
    per_pass = 4096 * (32 + 32) * 128 * 4 / (3.35e12 * 0.90)
    assert math.isclose(per_pass, 44.5166e-6, rel_tol=1e-5)
    assert math.isclose(rope.forward.memory_s - absent.forward.memory_s, per_pass, rel_tol=1e-9)
    assert math.isclose(rope.backward.memory_s - absent.backward.memory_s, per_pass, rel_tol=1e-9)
    assert rope.forward.gemm_s == absent.forward.gemm_s


def test_huggingface_models_are_not_given_megatron_s_fused_rope(llama2_7b):
    acc = dataclasses.replace(llama2_7b.accounting, implementation="huggingface")
    r = dataclasses.replace(llama2_7b, accounting=acc)
    rope = layer_kernels(r, r.model)
    absent = layer_kernels(r, dataclasses.replace(r.model, position="none"))
    assert rope.forward.memory_s == absent.forward.memory_s
