"""Eager attention from the kernel table's measured op set (`attention.eager`,
tiersim/workload/eager_attention.py): the H100's figures are the FlashAttention-3 paper's
"Standard attention" bars, looked up by hand; Megatron's eager layer is timed from them (the
full mask's rates over every score's products), the attention dropout's bytes left to the
op-by-op model; other op sets keep the op-by-op model."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.hardware.kernel_tables import kernel_table
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload import kernels as kernels_module
from tiersim.workload.eager_attention import DROPOUT_SCORE_B, MEASURED_SCORE_B
from tiersim.workload.layer_bytes import BWD_SCORES_B, FWD_SCORES_B, UNFUSED_GPT2

TERA = 1e12
S, HEADS, D = 4096, 32, 128  # one sequence of 4096 tokens, 32 heads of 128 (Llama 2 7B's)
HBM_BW = 3.35e12 * 0.90  # dgx-h100: HBM3 x memory_efficiency


def test_the_h100s_eager_figures_are_the_fa3_papers_standard_attention():
    # FlashAttention-3 paper, Figure 5 (forward) and 6 (backward), "Standard attention",
    # H100 80GB SXM5, TFLOP/s in FlashAttention's count, at 512, 1k, 2k, 4k, 8k (OOM at 16k)
    t = kernel_table("h100-sxm")
    fwd = [t.attention_rate("eager", "forward", False, 128, s) / TERA for s in (512, 4096, 8192)]
    assert fwd == [74, 133, 139]
    assert t.attention_rate("eager", "forward", False, 64, 2048) / TERA == 67
    assert t.attention_rate("eager", "forward", True, 128, 1024) / TERA == 31  # causal
    assert t.attention_rate("eager", "backward", False, 64, 8192) / TERA == 95
    assert t.attention_rate("eager", "backward", False, 128, 2048) / TERA == 159
    # past the measured 8k: held at 8k's rate
    assert t.attention_rate("eager", "forward", False, 128, 32768) / TERA == 139
    # head dim 96 at 1k: linear in log2 between 64's 63 and 128's 100:
    # log2(96 / 64) = 0.584963; 63 + 0.584963 x 37 = 63 + 21.6436 = 84.6436
    rate = t.attention_rate("eager", "forward", False, 96, 1024) / TERA
    assert rate == pytest.approx(84.6436, rel=1e-6)


@pytest.mark.parametrize("preset", ["h200-hbf", "gh200"])
def test_a_gpu_with_other_hbm_keeps_the_op_by_op_model(preset):
    # the H100's measurement ran its scores through 3.35 TB/s of HBM3 (`hbm_tb_s`); the H200
    # (h200-sxm, base h100-sxm: the table is inherited) has 4.8 TB/s of HBM3e, the GH200 (the
    # h100-sxm table) 4 TB/s: 43 % and 19 % off, over the 2 % that is the same memory
    assert kernel_table("h100-sxm").attention["eager"].hbm == 3.35e12
    assert kernel_table("h200-sxm").attention["eager"].hbm == 3.35e12
    raw = _raw("eager")
    raw["hardware"] = {"preset": preset}
    s = scenario(raw)
    r = resolve(s)
    assert kernels_module._Shape(r, build_model(s.model)).measured_eager(r) is None
    # on the H100 itself it is taken
    s = scenario(_raw("eager"))
    r = resolve(s)
    assert kernels_module._Shape(r, build_model(s.model)).measured_eager(r) is not None


def test_eager_attention_is_not_held_by_the_sustained_ceiling():
    # mostly memory-bound: 8k's 139 stays 139, where a fused kernel's ceiling is 0.888 x its
    # best (cuDNN forward: 0.888 x 617 = 547.896 holds its 2k's 617)
    t = kernel_table("h100-sxm")
    assert t.attention_rate("eager", "forward", False, 128, 8192) / TERA == 139
    assert t.attention_rate("cudnn", "forward", False, 128, 2048) / TERA == pytest.approx(547.896)


def test_the_measured_op_set_and_the_dropout_make_megatrons_score_bytes():
    # Megatron's fused kernels' 13 / 19 B a score: the measured op set's 8 (QK^T written 2,
    # softmax 4, PV's read 2) / 14 (dP 2, P for dV 2, softmax 6, dS twice 4), and the
    # attention dropout's 5 / 5
    assert MEASURED_SCORE_B[0] + DROPOUT_SCORE_B[0] == FWD_SCORES_B == 13
    assert MEASURED_SCORE_B[1] + DROPOUT_SCORE_B[1] == BWD_SCORES_B == 19


def _raw(kernel: str, implementation: str = "megatron", **training) -> dict:
    return {
        "name": f"eager-{kernel}",
        "model": {"preset": "llama-2-7b"},
        "training": {
            "implementation": implementation,
            "attention_kernel": kernel,
            "flash_kernel": "flash2" if kernel == "flash" else None,
            "micro_batch_size": 1,
            "seq_len": S,
            **training,
        },
        "hardware": {"preset": "dgx-h100"},
    }


def _layer(kernel: str, implementation: str = "megatron", **training):
    s = scenario(_raw(kernel, implementation, **training))
    return kernels_module.layer_kernels(resolve(s), build_model(s.model))


@pytest.fixture(scope="module")
def layers():
    return {"eager": _layer("eager"), "flash": _layer("flash")}


def test_megatrons_eager_layer_is_timed_from_the_table_by_hand(layers):
    eager, flash = layers["eager"], layers["flash"]
    # the layer's linears are the same either way: the difference is the attention core's.
    # Forward FLOPs, all 4096 x 4096 scores: 4 x 32 x 4096^2 x 128 = 274.88 GFLOP
    flops = 4 * HEADS * S * S * D
    # eager: the full mask's measured rate at (128, 4096), 133; FlashAttention-2 (causal,
    # half the FLOPs): 319, under its ceiling 0.888 x 370 = 328.6
    want_f = flops / 133e12 - flops / 2 / 319e12
    assert eager.forward.gemm_s - flash.forward.gemm_s == pytest.approx(want_f, rel=1e-9)
    # backward, FlashAttention's 2.5x: eager's full 174; FlashAttention-2 causal, the full
    # backward 310 x its forward's causal / full 319 / 368 = 268.72 (ceiling 0.888 x 322 = 285.9)
    want_b = 2.5 * flops / 174e12 - 2.5 * flops / 2 / (310 * 319 / 368 * 1e12)
    assert eager.backward.gemm_s - flash.backward.gemm_s == pytest.approx(want_b, rel=1e-9)
    # Llama's attention dropout is 0: no score byte left to the op-by-op model, so the
    # memory-bound kernels are flash's (which moves no score through HBM)
    assert eager.forward.memory_s == pytest.approx(flash.forward.memory_s, rel=1e-12)
    assert eager.backward.memory_s == pytest.approx(flash.backward.memory_s, rel=1e-12)


def test_an_attention_dropout_adds_its_bytes_beside_the_measured_time(layers):
    base = layers["eager"]
    raw = _raw("eager")
    raw["model"] = {"preset": "llama-2-7b", "attention_dropout": 0.1}
    s = scenario(raw)
    dropped = kernels_module.layer_kernels(resolve(s), build_model(s.model))
    # 5 B a score each way over 32 x 4096^2 = 536.9 M scores, at 3.35 TB/s x 0.90
    scores = HEADS * S * S
    assert dropped.forward.memory_s - base.forward.memory_s == pytest.approx(5 * scores / HBM_BW)
    assert dropped.backward.memory_s - base.backward.memory_s == pytest.approx(5 * scores / HBM_BW)
    assert dropped.forward.gemm_s == base.forward.gemm_s


@pytest.mark.parametrize(
    "implementation,training",
    [
        ("huggingface", {}),  # transformers' eager: another op set (float32 softmax, mask add)
        ("megatron", {"fp8": {"recipe": "delayed", "attention": True}}),  # FP8 products
    ],
)
def test_other_op_sets_keep_the_op_by_op_model(implementation, training):
    s = scenario(_raw("eager", implementation, **training))
    r = resolve(s)
    shape = kernels_module._Shape(r, build_model(s.model))
    assert shape.measured_eager(r) is None


def test_megatron_v1s_unfused_layer_keeps_the_op_by_op_model():
    raw = _raw("eager", fused_kernels=False, seq_len=1024)
    raw["model"] = {"preset": "gpt2"}
    s = scenario(raw)
    r = resolve(s)
    shape = kernels_module._Shape(r, build_model(s.model))
    assert shape.measured_eager(r) is None
    assert UNFUSED_GPT2.scores == (25.0, 27.0)
