"""`training.compile` (tiersim/workload/eager.py): a Llama-style layer's memory-bound bytes as
eager PyTorch runs transformers' code, one kernel an op, and as torch.compile fuses them;
worked by hand."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.core.errors import InputError
from tiersim.state.resolved import resolve
from tiersim.workload.kernels import layer_kernels

HBM = 3.35e12 * 0.90  # dgx-h100's HBM x memory_efficiency
S = 1024
E = S * 4096  # hidden elements (Llama 2 7B, one GPU, micro-batch 1)
E_QK = S * (4096 + 4096)  # q and k elements: 32 heads and 32 kv heads of 128
E_F = S * 11008  # the MLP's width


def llama(compile_=None, implementation="huggingface"):
    raw = {
        "name": "c",
        "model": {"preset": "llama-2-7b"},
        "training": {
            "seq_len": S,
            "implementation": implementation,
            "compile": compile_,
        },
        "hardware": {"preset": "dgx-h100"},
    }
    r = resolve(scenario(raw))
    return layer_kernels(r, r.model)


def test_eager_moves_more_bytes_than_compiled_by_hand():
    eager, compiled = llama(False), llama(True)
    # forward: hidden 2 x 36 + 2 x 6 + 4 = 88 B eager, 2 x 4 + 12 + 4 = 24 compiled;
    # rotary 20 vs 4 per q/k element; SwiGLU 10 vs 6 per MLP element
    fwd = (88 - 24) * E + (20 - 4) * E_QK + (10 - 6) * E_F
    assert eager.forward.memory_s - compiled.forward.memory_s == pytest.approx(fwd / HBM)
    # backward: hidden 2 x 64 + 12 + 4 = 144 vs 2 x 6 + 12 + 4 = 28; rotary 20 vs 4; 18 vs 10
    bwd = (144 - 28) * E + (20 - 4) * E_QK + (18 - 10) * E_F
    assert eager.backward.memory_s - compiled.backward.memory_s == pytest.approx(bwd / HBM)
    # the GEMMs do not change
    assert eager.forward.gemm_s == compiled.forward.gemm_s


def test_compiled_against_the_fused_kernels_default():
    # the key left out: Megatron's fused bytes, gated (hidden 22 / 38, MLP 6 / 10), no
    # rotary term; compiled: hidden 24 / 28, rotary 4 / 4, MLP 6 / 10
    default, compiled = llama(None), llama(True)
    fwd = (24 - 22) * E + 4 * E_QK
    bwd = (28 - 38) * E + 4 * E_QK
    assert compiled.forward.memory_s - default.forward.memory_s == pytest.approx(fwd / HBM)
    assert compiled.backward.memory_s - default.backward.memory_s == pytest.approx(bwd / HBM)


def test_compile_is_refused_where_its_kernels_are_not_counted():
    with pytest.raises(InputError, match=r"training.compile: false: .*implementation megatron"):
        llama(False, implementation="megatron")
