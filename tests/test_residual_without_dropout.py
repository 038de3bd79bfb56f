"""Megatron-Core's residual adds without hidden dropout: ATen's dropout returns its input at
p = 0, so no mask is written and no dropout backward runs; without biases no bias gradient
either (tiersim.workload.megatron_elementwise.without_dropout). Expected by hand."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import published

from tiersim.workload.kernels import element_bytes


@pytest.fixture(scope="module")
def llama2_7b():
    return published("nemo2407-llama2-7b-8gpus.yaml")


def test_llama_without_dropout_or_biases(llama2_7b):
    # fused kernels per hidden value: forward 2 norms x 4 + 2 adds x 7 = 22, less the two
    # 1-byte masks = 20; backward norms 6 x 2 + residual-gradient adds 6 x 2 + (dropout 5 +
    # bias gradient 2) x 2 = 38, less both dropout backwards and bias gradients = 24
    b = element_bytes(llama2_7b, llama2_7b.model)
    assert b.hidden == (20.0, 24.0)
    assert b.ffn == (6.0, 10.0)  # SwiGLU's, unchanged


def test_biases_keep_their_gradient(llama2_7b):
    model = dataclasses.replace(llama2_7b.model, attn_out_bias=True, mlp_bias=True)
    # 38 - 2 x 5 (no dropout backward) = 28
    assert element_bytes(llama2_7b, model).hidden == (20.0, 28.0)


def test_dropout_keeps_the_fused_kernels_bytes(llama2_7b):
    acc = dataclasses.replace(llama2_7b.accounting, hidden_dropout=0.1)
    r = dataclasses.replace(llama2_7b, accounting=acc)
    assert element_bytes(r, r.model).hidden == (22.0, 38.0)
