"""DeepSeek-V3's multi-token-prediction modules (`model.mtp_layers`): their parameters, FLOPs
and activations, on the last pipeline stage, by hand.

The model (tests/test_moe.py's SMALL): 4 layers, h = 64, 4 heads of 16, RMSNorm, layers 1-3
MoE of 8 experts of width 32 (gated), 2 per token; one micro-batch s = 16, b = 2 (32 tokens).
"""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario

from tiersim.state.inventory import outside_activation_bytes, stage_matrices
from tiersim.state.mtp import mtp_forward_flops
from tiersim.state.resolved import resolve

SMALL = {
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
}
BASE = {
    "name": "mtp",
    "model": SMALL,
    "training": {"micro_batch_size": 2, "seq_len": 16, "attention_kernel": "flash"},
    "hardware": {"preset": "dgx-h100"},
}

# The last layer (MoE): q, k, v, o 4 x 64 x 64 = 16,384; two RMSNorms 128; router 64 x 8 =
# 512; experts 8 x 3 x 64 x 32 = 49,152: 66,176. An MTP module adds its three norms (192) and
# its projection 2h x h = 8,192: 74,560 parameters.
MODULE = 16_384 + 128 + 512 + 49_152 + 192 + 8_192


def stage_params(r, stage):
    """Parameters one GPU of `stage` holds (the inventory's tensors of that stage)."""
    par = r.execution.parallel
    mats = stage_matrices(
        r.model, r.units, stage, par.pipeline, par.tensor, par.expert, None, par.stage_layers
    )
    return sum(m.size for m in mats)


def resolved(mtp: int, **over):
    return resolve(scenario(merge(BASE, {"model": {"mtp_layers": mtp}, **over})))


def test_parameters():
    assert resolved(1).model.parameters - resolved(0).model.parameters == MODULE
    assert resolved(2).model.parameters - resolved(0).model.parameters == 2 * MODULE


def test_forward_flops():
    # 32 tokens: projection 2 x 32 x 128 x 64 = 524,288; own logits 2 x 32 x 64 x 100 =
    # 409,600; the layer: 2 x 32 x (16,384 attention + 512 router + 2 experts x 6,144) =
    # 1,867,776 and scores and values 4 x 2 x 16 x 16 x 4 x 16 = 131,072
    m = resolved(1).model
    assert mtp_forward_flops(m, 16, 2) == pytest.approx(524_288 + 409_600 + 1_867_776 + 131_072)


def test_on_the_last_stage_only():
    # pipeline 2: the module's parameters join stage 1 (the head's), not stage 0
    r0, r1 = resolved(0, parallel={"pipeline": 2}), resolved(1, parallel={"pipeline": 2})
    assert stage_params(r1, 1) - stage_params(r0, 1) == MODULE
    assert stage_params(r1, 0) == stage_params(r0, 0)
    # activations outside the layers (Megatron counts none of its own): the two norm inputs
    # and the projection input, 2 x 2·sbh = 2 x 2 x 2 x 32 x 64 = 16,384 bytes, beside what
    # a layer like the last keeps; none on stage 0
    outside = outside_activation_bytes(r1, r1.model, 1)
    layer = r1.model.layer_activation_bytes(16, 2, 1, False, "none", r1.accounting, 3)
    assert outside == pytest.approx(16_384 + layer)
    assert outside_activation_bytes(r1, r1.model, 0) == 0


def test_refused_outside_megatron(cli, write):
    doc = merge(BASE, {"model": {"mtp_layers": 1}, "training": {"implementation": "huggingface"}})
    code, _, err = cli("validate", write(doc))
    assert code == 2 and "Traceback" not in err
    assert "model.mtp_layers: is 1, but training.implementation huggingface" in err
