"""`training.framework: megatron` brings Transformer Engine's attention backend on the GPU
(tiersim/config/framework_attention.py): cuDNN's fused attention on Hopper and later, resolved
into the execution plan and the scenario.yaml a run writes; a given flash_kernel wins."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.config.document import scenario_document
from tiersim.config.framework_attention import resolved_flash_kernel
from tiersim.state.resolved import resolve
from tiersim.workload import kernels as kernels_module

T = 1e12


def raw(preset="dgx-h100", **training):
    return {
        "name": "fa",
        "model": {"preset": "llama-2-7b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, **training},
        "hardware": {"preset": preset},
    }


def test_megatron_on_an_h100_or_h200_runs_cudnns_attention():
    # TE's get_attention_backend prefers FusedAttention (cuDNN) from compute capability 9.0;
    # h100-sxm.yaml says 9.0, h200-sxm.yaml inherits it; both tables measure cuDNN's rates
    for preset in ("dgx-h100", "h200-hbf"):
        s = scenario(raw(preset, framework="megatron", attention_kernel="flash"))
        assert resolved_flash_kernel(s) == "cudnn"
        assert resolve(s).execution.training.flash_kernel == "cudnn"
        assert scenario_document(s)["training"]["flash_kernel"] == "cudnn"


def test_a_given_kernel_another_framework_or_gpu_keeps_its_own():
    given = scenario(raw(framework="megatron", attention_kernel="flash", flash_kernel="flash3"))
    assert resolved_flash_kernel(given) == "flash3"
    for s in (
        scenario(raw(attention_kernel="flash")),  # no framework: FlashAttention-2 (None)
        scenario(raw(framework="fsdp", attention_kernel="flash")),
        scenario(raw(framework="megatron", attention_kernel="eager")),  # not a fused kernel
        scenario(raw("dgx-a100", framework="megatron", attention_kernel="flash")),  # no table
    ):
        assert resolved_flash_kernel(s) is None
        assert scenario_document(s)["training"]["flash_kernel"] is None
    # an A100's table: compute capability 8.0, where TE keeps FlashAttention
    a100 = raw("dgx-a100", framework="megatron", attention_kernel="flash")
    a100["hardware"]["gpu"] = {"kernels": "a100-sxm"}
    assert resolved_flash_kernel(scenario(a100)) is None


def test_the_resolved_kernel_times_the_layers_attention():
    # Llama 2 7B, s = 4096, 32 heads of 128, causal: 4 * 4096^2 * 128 * 32 / 2 = 1.374e11
    # FLOPs forward at cuDNN's 518 TFLOP/s (FlashAttention-3 paper Fig. 5), not
    # FlashAttention-2's 319
    r = resolve(scenario(raw(framework="megatron", attention_kernel="flash")))
    sh = kernels_module._Shape(r, r.model)
    fwd, _ = sh.fused_attention(r, sh.attention_core(r, (13.0, 19.0)))
    assert fwd == pytest.approx(4 * 4096**2 * 128 * 32 / 2 / (518 * T))
