"""Selective recompute's time reruns exactly what the layer does not keep, from the one decision
both read (`Accounting.core_checkpointed`, state/accounting.py; state/activation_policy.py
`core_recomputed`): Megatron-Core's checkpoint holds the whole attention core whatever the
kernel, Megatron-DeepSpeed's its classic (eager) attention only, FlashAttention running outside
it (microsoft/Megatron-DeepSpeed megatron/model/transformer.py at 1e3fc81d, ParallelAttention);
and DeepSeek-V3's MTP modules recompute as Megatron-Core's MultiTokenPredictionLayer does
(NVIDIA/Megatron-LM megatron/core/transformer/multi_token_prediction.py at 00611e6e: one
checkpoint a module under full, its TransformerLayer under selective as the model's layers).

The dense layer (tests/test_megatron_selective_lse.py's): GPT-like, h = 512, a = 8 heads of 64,
f = 2048, s = 2048, b = 1, bf16, on the H100 preset. The MTP model (tests/test_mtp.py's SMALL):
4 layers, h = 64, 4 heads of 16, the last an MoE layer of 8 experts of width 32 (2 a token,
gated), vocabulary 100; s = 16, b = 2 (32 tokens), flash.
"""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario

from tiersim.runner import simulate
from tiersim.state.inventory import outside_activation_bytes
from tiersim.state.resolved import resolve
from tiersim.workload.kernels import Kernels, attention_pass_s, layer_kernels, unit_kernels
from tiersim.workload.stage_times import flop_timed_kernels

DENSE = {
    "name": "rerun",
    "model": {
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 2048,
    },
    "training": {
        "implementation": "megatron",
        "attention_kernel": "flash",
        "seq_len": 2048,
        "recompute": "selective",
    },
    "hardware": {"preset": "dgx-h100"},
}
MTP = {
    "name": "mtp-rerun",
    "model": {
        "layers": 4,
        "hidden": 64,
        "heads": 4,
        "ffn_hidden": 128,
        "vocab": 100,
        "gated_mlp": True,
        "norm": "rmsnorm",
        "position": "rope",
        "experts": 8,
        "experts_per_token": 2,
        "expert_ffn_hidden": 32,
        "first_dense_layers": 1,
        "mtp_layers": 1,
    },
    "training": {"micro_batch_size": 2, "seq_len": 16, "attention_kernel": "flash"},
    "hardware": {"preset": "dgx-h100"},
}
# the MTP modules' FLOPs are priced as their forward is: peak x efficiency of the H100 preset
# (tiersim/presets/hardware/dgx-h100.yaml: bf16 989 TFLOP/s, efficiency 0.803)
MTP_RATE = 989e12 * 0.803


def dense(**training):
    return resolve(scenario(merge(DENSE, {"training": training})))


def mtp(mtp_layers: int = 1, **training):
    over = {"model": {"mtp_layers": mtp_layers}, "training": training}
    return resolve(scenario(merge(MTP, over)))


def test_one_decision_per_framework_and_kernel():
    """Megatron-Core (no framework, or megatron): the core checkpointed whatever the kernel;
    Megatron-DeepSpeed: eager only; transformers' layers under tiersim's checkpoint: always;
    torchtitan's layer: no core checkpoint of its own."""
    cases = {
        (None, "megatron", "flash"): True,
        ("megatron", "megatron", "flash"): True,
        ("deepspeed", "megatron", "eager"): True,
        ("deepspeed", "megatron", "flash"): False,
        (None, "huggingface", "flash"): True,
    }
    for (framework, implementation, kernel), want in cases.items():
        training = {"implementation": implementation, "attention_kernel": kernel}
        if framework:
            training["framework"] = framework
        assert dense(**training).accounting.core_checkpointed is want, (framework, kernel)
    titan = {"implementation": "torchtitan", "attention_kernel": "sdpa"}
    llama = {"norm": "rmsnorm", "position": "rope", "gated_mlp": True}
    r = resolve(scenario(merge(DENSE, {"model": llama, "training": titan})))
    assert r.accounting.core_checkpointed is False


def test_megatron_deepspeed_flash_reruns_nothing_of_the_core():
    """Its FlashAttention keeps the log-sum-exp (65,536 B a layer, what the memory keeps) and
    its backward reruns no kernel of the core: no GEMM and no byte again."""
    r = dense(framework="deepspeed")
    assert layer_kernels(r, r.model).recompute == Kernels(0.0, 0.0)
    # the rest of the layer's passes as Megatron-Core's
    core = dense()
    assert layer_kernels(r, r.model).forward == layer_kernels(core, core.model).forward


def test_megatron_core_flash_reruns_the_whole_fused_core():
    """The checkpoint reruns the fused kernel's forward, the core's forward as the step times
    it (no score bytes: flash keeps S and P on chip)."""
    r = dense()
    forward_s, _ = attention_pass_s(r, r.model)
    assert forward_s > 0
    assert layer_kernels(r, r.model).recompute == Kernels(forward_s, 0.0)


def test_megatron_deepspeed_classic_attention_reruns_its_s2_core():
    """Eager under Megatron-DeepSpeed: `checkpoint_core_attention` holds the classic core (QK^T,
    the softmax, the dropout, PV), the same s x s core Megatron-Core reruns."""
    mds, mcore = (
        dense(framework="deepspeed", attention_kernel="eager"),
        dense(attention_kernel="eager"),
    )
    rerun = layer_kernels(mds, mds.model).recompute
    assert rerun == layer_kernels(mcore, mcore.model).recompute
    assert rerun.gemm_s == pytest.approx(attention_pass_s(mds, mds.model)[0])
    assert rerun.memory_s > 0  # the s x s score bytes again


def test_flop_timed_layers_read_the_same_decision():
    """An MoE layer (timed by its FLOPs): under Megatron-DeepSpeed's flash nothing of the core
    again; under Megatron-Core its QK^T and AV, 4·b·s²·a·d = 4 x 2 x 16² x 4 x 16 = 131,072
    FLOPs, and the 5 B a score, 5 x 4 x 16² x 2 = 10,240 B."""
    mds = mtp(0, recompute="selective", framework="deepspeed")
    _, _, rerun = flop_timed_kernels(mds, mds.model, True, False)
    assert rerun == Kernels(0.0, 0.0)
    r = mtp(0, recompute="selective")
    _, _, rerun = flop_timed_kernels(r, r.model, True, False)
    assert rerun.gemm_s > 0 and rerun.memory_s > 0


def test_mtp_bytes_follow_the_recompute():
    """One module: its norms' inputs (the embedding's output and the hidden states, 2·sbh
    each: 2 x 2 x 32 x 64 = 8,192 B) are the full-recompute checkpoint's inputs, all it keeps;
    under selective its layer keeps what the model's last keeps, flash's log-sum-exp
    (4·a·s·b = 4 x 4 x 16 x 2 = 512 B) recomputed under Megatron-Core, kept under
    Megatron-DeepSpeed."""
    none = mtp(recompute="none")
    whole = outside_activation_bytes(none, none.model, 0)
    full = mtp(recompute="full")
    assert outside_activation_bytes(full, full.model, 0) == 8_192
    sel = mtp(recompute="selective")
    assert outside_activation_bytes(sel, sel.model, 0) == whole - 512
    mds = mtp(recompute="selective", framework="deepspeed")
    assert outside_activation_bytes(mds, mds.model, 0) == whole


def test_mtp_rerun_time_by_hand():
    """The last stage's rest unit reruns the module's forward under full: the projection
    2 x 32 x 2h x h = 524,288 FLOPs and its layer 1,867,776 + 131,072 (tests/test_mtp.py), not
    its logits (after the checkpoint): 2,523,136 FLOPs; under selective its core, 131,072;
    at 989 TFLOP/s x 0.803."""
    for training, flops in (
        ({"recompute": "none"}, 0),
        ({"recompute": "full"}, 524_288 + 1_867_776 + 131_072),
        ({"recompute": "selective"}, 131_072),
        ({"recompute": "selective", "framework": "deepspeed"}, 0),
        ({"recompute": "selective", "recompute_modules": ["mlp"]}, 0),  # the last layer is MoE
    ):
        r = mtp(**training)
        _, _, rerun = unit_kernels(r, r.model, False, True, True)
        assert rerun.gemm_s == pytest.approx(flops / MTP_RATE, rel=1e-12), training
        assert rerun.memory_s == 0.0


def test_the_step_reruns_what_the_layers_do_not_keep():
    """Scenario level: Megatron-DeepSpeed's flash step under selective recompute has no
    recompute and the compute of the step without it; Megatron-Core's reruns each of its 2
    layers' fused core once a micro-batch; the MTP module's rerun joins the step's recompute
    under full (1 micro-batch): with the module minus without = 2,523,136 FLOPs' time."""
    mds = simulate(scenario(merge(DENSE, {"training": {"framework": "deepspeed"}})))
    plain = simulate(
        scenario(merge(DENSE, {"training": {"framework": "deepspeed", "recompute": "none"}}))
    )
    assert mds.recompute_s == 0.0
    assert mds.compute_s == pytest.approx(plain.compute_s, rel=1e-12)
    core = simulate(scenario(DENSE))
    r = dense()
    assert core.recompute_s == pytest.approx(2 * attention_pass_s(r, r.model)[0], rel=1e-9)
    full = {"training": {"recompute": "full"}}
    with_mtp = simulate(scenario(merge(MTP, full)))
    without = simulate(scenario(merge(MTP, merge(full, {"model": {"mtp_layers": 0}}))))
    extra = with_mtp.recompute_s - without.recompute_s
    assert extra == pytest.approx((524_288 + 1_867_776 + 131_072) / MTP_RATE, rel=1e-6)
