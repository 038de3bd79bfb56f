"""Attention dropout at probability 0 runs no kernel (ATen's dropout returns its input), so the
op-by-op eager model charges none of its bytes per score, as the measured-table path and the
activation memory already do (tiersim.workload.layer_bytes.without_attention_dropout).
Expected by hand."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import published

from tiersim.workload.kernels import element_bytes
from tiersim.workload.layer_bytes import UNFUSED_GPT2, without_attention_dropout


@pytest.fixture(scope="module")
def llama2_7b():
    return published("nemo2407-llama2-7b-8gpus.yaml")  # Llama 2: attention_dropout 0.0


def with_dropout(r, p):
    return dataclasses.replace(r, accounting=dataclasses.replace(r.accounting, attention_dropout=p))


def test_no_attention_dropout_no_dropout_bytes(llama2_7b):
    assert llama2_7b.accounting.attention_dropout == 0.0
    # fused, per score: forward softmax 4 + QK^T written and P read for PV 4 = 8 (13 less the
    # dropout's 5); backward softmax 6 + the products' reads and writes 8 = 14 (19 less 5)
    assert element_bytes(llama2_7b, llama2_7b.model).scores == (8.0, 14.0)


def test_attention_dropout_keeps_its_kernel(llama2_7b):
    r = with_dropout(llama2_7b, 0.1)
    # softmax 4 + dropout 5 + QK^T / PV 4 = 13; softmax 6 + dropout 5 + products 8 = 19
    assert element_bytes(r, r.model).scores == (13.0, 19.0)


def test_unfused_without_attention_dropout(llama2_7b):
    # Megatron-LM v1's ops per score: forward 2 + 4 + 4 + 4 + softmax 4 + PV's read 2 = 20
    # (25 less dropout's 5); backward dP/P 4 + softmax 6 + mask 4 + scale 4 + reads 4 = 22
    assert without_attention_dropout(llama2_7b, UNFUSED_GPT2).scores == (20.0, 22.0)
    assert without_attention_dropout(with_dropout(llama2_7b, 0.1), UNFUSED_GPT2).scores == (
        25.0,
        27.0,
    )
