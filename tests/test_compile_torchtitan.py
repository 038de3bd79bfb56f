"""`training.compile` under `implementation: torchtitan` (tiersim/workload/eager.py): torchtitan's
Llama layer runs transformers' ops but its norms, `nn.RMSNorm`, one fused kernel each way in
PyTorch 2.13.0 (aten::_fused_rms_norm), and its fused q/k/v projection's split copies
(torchtitan 0.3.0's FusedQKVLinear); worked by hand."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.resolved import resolve
from tiersim.workload.kernels import layer_kernels

torch = pytest.importorskip("torch")

HBM = 3.35e12 * 0.90  # dgx-h100's HBM x memory_efficiency
S = 1024
E = S * 4096  # hidden elements (Llama 2 7B, one GPU, micro-batch 1)
E_QK = S * (4096 + 4096)  # q and k elements: 32 heads and 32 kv heads of 128
E_F = S * 11008  # the MLP's width
E_QKV = S * (4096 + 2 * 4096)  # q, k and v elements: the fused projection's split parts


def llama(compile_, implementation):
    raw = {
        "name": "c",
        "model": {"preset": "llama-2-7b"},
        # one attention kernel for both (transformers' default, SDPA behind a padding mask,
        # reads the mask; torchtitan's passes none)
        "training": {
            "seq_len": S,
            "implementation": implementation,
            "compile": compile_,
            "attention_kernel": "flash",
        },
        "hardware": {"preset": "dgx-h100"},
    }
    r = resolve(scenario(raw))
    return layer_kernels(r, r.model)


@pytest.fixture(scope="module")
def layers():
    return {
        (c, impl): llama(c, impl) for c in (False, True) for impl in ("torchtitan", "huggingface")
    }


def test_torchtitans_eager_norms_are_one_kernel_each_way_by_hand(layers):
    titan, hf = layers[False, "torchtitan"], layers[False, "huggingface"]
    # the two norms: transformers' composite 36 B forward / 64 backward an element, PyTorch's
    # fused RMSNorm 4 (read x, write y) / 10 (the input gradient's kernel: dy, x read, dx
    # written, 6; the weight gradient's: dy and x read again, 4); torchtitan's fused q/k/v
    # projection's split copies, 4 / 4 per q, k and v element, which transformers' three
    # projections do not make; rotary (20 / 20), SwiGLU (10 / 18), residual adds and the
    # output copy the same
    fwd = 2 * (36 - 4) * E - 4 * E_QKV
    assert hf.forward.memory_s - titan.forward.memory_s == pytest.approx(fwd / HBM)
    bwd = 2 * (64 - 10) * E - 4 * E_QKV
    assert hf.backward.memory_s - titan.backward.memory_s == pytest.approx(bwd / HBM)
    assert titan.forward.gemm_s == hf.forward.gemm_s


def test_torchtitan_eager_against_compiled_by_hand(layers):
    eager, compiled = layers[False, "torchtitan"], layers[True, "torchtitan"]
    # forward: hidden 2 x 4 + 2 x 6 + 4 = 24 B either way (the fused norm is what
    # torch.compile's is); rotary 20 vs 4 per q/k element; SwiGLU 10 vs 6 per MLP element;
    # the split's copies 4 per q/k/v element eager, fused away compiled
    fwd = (20 - 4) * E_QK + (10 - 6) * E_F + 4 * E_QKV
    assert eager.forward.memory_s - compiled.forward.memory_s == pytest.approx(fwd / HBM)
    # backward: hidden 2 x 10 + 12 + 4 = 36 vs 2 x 6 + 12 + 4 = 28; rotary 20 vs 4; 18 vs 10;
    # the split's cat 4 vs none
    bwd = (36 - 28) * E + (20 - 4) * E_QK + (18 - 10) * E_F + 4 * E_QKV
    assert eager.backward.memory_s - compiled.backward.memory_s == pytest.approx(bwd / HBM)
    # compiled, torchtitan's layer is transformers' (the same chains fused)
    assert compiled.forward == layers[True, "huggingface"].forward
    assert compiled.backward == layers[True, "huggingface"].backward


def test_pytorch_2_13s_rms_norm_runs_the_fused_op():
    # the pinned PyTorch's profiler: nn.RMSNorm with bf16 weight and input calls
    # aten::rms_norm -> aten::_fused_rms_norm (on this CPU build its composite fallback runs
    # under it; CUDA registers its own one-kernel implementation)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    norm = torch.nn.RMSNorm(64, eps=1e-6).to(torch.bfloat16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        norm(x)
    names = [e.name for e in prof.events()]
    assert names.index("aten::rms_norm") < names.index("aten::_fused_rms_norm")
