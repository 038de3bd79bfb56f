"""The word embedding's dense gradient under Megatron's implementation: ATen's
embedding_dense_backward zero-fills the whole ceil(V/t) x h gradient and the hook adds it into
the gradient buffer, every micro-batch (tiersim.workload.megatron_elementwise). Expected by hand."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import published

from tiersim.workload.megatron_elementwise import dense_gradient_bytes


@pytest.fixture(scope="module")
def llama3_8b():
    return published("nemo2407-llama3-8b-8gpus.yaml")


def test_llama3_8b_bf16_buffer(llama3_8b):
    # 128,256 x 4,096 = 525,336,576 values, TP 1; zeros 2 + gradient read 2 + the bf16
    # buffer read 2 and written 2 = 8 B: 4,202,692,608 B a micro-batch
    assert dense_gradient_bytes(llama3_8b, llama3_8b.model) == 4_202_692_608


def test_gpt3_175b_fp32_buffer_split_over_the_tensor_group():
    # the 512-GPU row syncs its gradients in bf16 (docs/nemo-memory.md); in fp32 here
    r = published("nemo2407-gpt3-175b-512gpus.yaml", "training.precision.gradients=fp32")
    # NeMo pads 50,257 to a multiple of 128 x TP 4 = 512: 50,688; 50,688 / 4 = 12,672 rows
    # x 12,288 = 155,713,536 values; fp32 gradients: 2 + 2 + 4 + 4 = 12 B: 1,868,562,432 B
    assert dense_gradient_bytes(r, r.model) == 1_868_562_432
    # as shipped, bf16: 2 + 2 + 2 + 2 = 8 B: 155,713,536 x 8 = 1,245,708,288 B
    shipped = published("nemo2407-gpt3-175b-512gpus.yaml")
    assert dense_gradient_bytes(shipped, shipped.model) == 1_245_708_288


def test_other_implementations_are_left_as_they_were(llama3_8b):
    acc = dataclasses.replace(llama3_8b.accounting, implementation="huggingface")
    r = dataclasses.replace(llama3_8b, accounting=acc)
    assert dense_gradient_bytes(r, r.model) == 0.0
