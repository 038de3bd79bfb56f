"""FP8 training (`training.fp8`, tiersim/workload/fp8.py): which ops run in FP8, the recipe's
quantization kernels, its GEMM rate; worked by hand."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.config.fp8 import Fp8
from tiersim.core.errors import InputError
from tiersim.state.resolved import resolve
from tiersim.workload.fp8 import quantize_bytes
from tiersim.workload.kernels import head_kernels, layer_kernels

T = 1e12
HBM = 3.35e12 * 0.90  # dgx-h100's HBM x memory_efficiency


def test_quantize_bytes_by_recipe():
    # one linear: 8 tokens, N = 6 outputs, K = 4 inputs; 2 micro-batches a step
    # inputs 8 x 4 = 32, the weight 4 x 6 = 24 once a step = 12 a micro-batch, gradients 8 x 6
    lin = [(8, 6, 4)]
    assert quantize_bytes(Fp8(recipe="delayed"), lin, 2) == (4 * (32 + 12), 4 * 48)
    assert quantize_bytes(Fp8(recipe="tensorwise"), lin, 2) == (6 * (32 + 12), 6 * 48)
    assert quantize_bytes(Fp8(recipe="blockwise"), lin, 2) == (6 * 44, 6 * 48)
    mx = 2 * (2 + 1 + 1 / 32)  # two passes, a scale byte per 32 elements each
    assert quantize_bytes(Fp8(recipe="mxfp8"), lin, 2) == pytest.approx((mx * 44, mx * 48))


def llama7b(fp8=None, **training):
    raw = {
        "name": "f",
        "model": {"preset": "llama-2-7b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "fp8": fp8, **training},
        "hardware": {"preset": "dgx-h100"},
    }
    return resolve(scenario(raw))


# Llama 2 7B's four linears on one GPU, (M, N, K): QKV (4096, 12288, 4096), output
# (4096, 4096, 4096), gated FC1 (4096, 22016, 4096), FC2 (4096, 4096, 11008); every size at or
# past the H100 table's 4096 edge: 783.3 TFLOP/s BF16 burst. FP8 runs at BF16's shape at half
# the K x 1402.6 / 794.5: K 4096 looked up at 2048, (4096, >= 4096, 2048) = 738.7 x 1.765387 =
# 1304.09; K 8192 or more at the 4096 edge, 783.3 x 1.765387 = 1382.83. Under sustained load
# (h100-sxm.yaml `sustained`, 0.888) no BF16 GEMM runs above 0.888 x 794.5 = 705.516 and no FP8
# one above 0.888 x 1402.6 = 1245.5088 TFLOP/s: every linear here is held there.
LINEARS = [(4096, 12288, 4096), (4096, 4096, 4096), (4096, 22016, 4096), (4096, 4096, 11008)]
QKV, OUT, FC1, FC2 = (2 * m * n * k for m, n, k in LINEARS)
FLOPS = QKV + OUT + FC1 + FC2
LEVEL = 1402.6 / 794.5
BF16, FP8_HELD = 705.516 * T, 1245.5088 * T
FP8_FORWARD = FLOPS / FP8_HELD
# backward: each linear's input gradient and weight gradient, held at the same ceiling
FP8_BACKWARD = 2 * FLOPS / FP8_HELD


def test_the_linears_run_in_fp8_and_attention_and_the_head_do_not():
    bf16, fp8 = llama7b(), llama7b({"recipe": "delayed"})
    kb, kf = layer_kernels(bf16, bf16.model), layer_kernels(fp8, fp8.model)
    # forward: only the linears change (attention stays BF16)
    assert kb.forward.gemm_s - kf.forward.gemm_s == pytest.approx(FLOPS / BF16 - FP8_FORWARD)
    # backward: each linear's two GEMMs (input and weight gradients), 2x the FLOPs
    assert kb.backward.gemm_s - kf.backward.gemm_s == pytest.approx(2 * FLOPS / BF16 - FP8_BACKWARD)
    # the output head's logits GEMM stays in BF16
    assert head_kernels(bf16, bf16.model) == head_kernels(fp8, fp8.model)


def test_the_recipes_kernels_add_memory_bound_time():
    bf16, fp8 = llama7b(), llama7b({"recipe": "tensorwise"})
    kb, kf = layer_kernels(bf16, bf16.model), layer_kernels(fp8, fp8.model)
    inputs = sum(m * k for m, _, k in LINEARS)  # 4096 x (4096 + 4096 + 4096 + 11008)
    weights = sum(k * n for _, n, k in LINEARS)  # one micro-batch a step: all of it
    grads = sum(m * n for m, n, _ in LINEARS)
    assert inputs == 4096 * 23296 and grads == 4096 * 42496
    assert kf.forward.memory_s - kb.forward.memory_s == pytest.approx(6 * (inputs + weights) / HBM)
    assert kf.backward.memory_s - kb.backward.memory_s == pytest.approx(6 * grads / HBM)


def test_blockwise_gemms_run_at_their_measured_share():
    tw, bw = llama7b({"recipe": "tensorwise"}), llama7b({"recipe": "blockwise"})
    kt, kb = layer_kernels(tw, tw.model), layer_kernels(bw, bw.model)
    # DeepGEMM's share of the tensorwise rate, 0.953 (h100-sxm.yaml), before the ceiling:
    # K 4096 (QKV, output, FC1) 1304.09 x 0.953 = 1242.80, under the 1245.5088 ceiling; FC2's
    # long K 1382.83 x 0.953 = 1317.84, held at it as the tensorwise GEMM is
    blockwise_k4096 = 738.7 * LEVEL * 0.953 * T
    assert kb.forward.gemm_s - kt.forward.gemm_s == pytest.approx(
        (QKV + OUT + FC1) * (1 / blockwise_k4096 - 1 / FP8_HELD)
    )


def test_fp8_attention_runs_its_products_in_fp8():
    # eager attention's QK^T (4096 x 4096, K = 128) and PV (4096 x 128, K = 4096), batched
    # over 32 heads as one GEMM of 32 x 4096 rows, 2 * 4096 * 4096 * 128 * 32 FLOPs each;
    # sizes under the grid held at its 1024 edge. FP8 at half the K x 1402.6 / 794.5: QK^T's
    # 64 still at the 1024 edge, 677.4; PV's 2048, (4096, 1024, 2048) = 632.0; under the
    # FP8 sustained ceiling (1245.5088) 677.4 x 1.765387 = 1195.87 and 632.0 x 1.765387 =
    # 1115.74 keep their rates. BF16 (Megatron's eager attention on the H100) is the table's
    # measured eager op set (docs/eager-attention.md): both products and the softmax's bytes
    # at the full mask's 133 TFLOP/s (head dim 128, 4k) over 2f FLOPs
    plain = llama7b({"recipe": "delayed"})
    fp8_att = llama7b({"recipe": "delayed", "attention": True})
    kp, ka = layer_kernels(plain, plain.model), layer_kernels(fp8_att, fp8_att.model)
    f = 2 * 4096 * 4096 * 128 * 32
    bf16 = 2 * f / (133 * T)
    fp8 = (f / (677.4 * T) + f / (632.0 * T)) / LEVEL
    assert kp.forward.gemm_s - ka.forward.gemm_s == pytest.approx(bf16 - fp8)


def test_a_recipe_the_gpus_table_does_not_measure_is_refused():
    raw = {
        "name": "f",
        "model": {"preset": "llama-2-7b"},
        "training": {"fp8": {"recipe": "mxfp8"}},
        "hardware": {"preset": "dgx-h100"},
    }
    with pytest.raises(InputError, match=r"training.fp8.recipe.*no measured FP8 GEMM rate"):
        scenario(raw)
    raw["hardware"] = {"preset": "dgx-a100"}
    raw["training"] = {"fp8": {"recipe": "delayed"}}
    with pytest.raises(
        InputError, match=r"training.fp8: FP8 linears need hardware.gpu.peak_flops.fp8"
    ):
        scenario(raw)
