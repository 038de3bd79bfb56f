"""The final norm's backward transients (the part `final norm's backward transients (fp32)`),
written out by hand: transformers' LlamaRMSNorm computes in fp32, and its backward holds
four fp32 s·b·h tensors (pow's, the mean's division, the two products' gradients) and, for
a 16-bit model, the incoming gradient cast to fp32 (state/loss_memory.py; measured on the
CPU in tests/test_step_measure.py)."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import FINAL_NORM, build_events

MODEL = {
    "hidden": 64,
    "layers": 2,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 512,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
    "tied_embeddings": False,
}


def final_norm_bytes(dtype: str, implementation: str, batch: int = 1) -> list[tuple[str, int]]:
    precision = {"weights": dtype, "gradients": dtype, "master": "none", "optimizer": dtype}
    training = {
        "seq_len": 128,
        "micro_batch_size": batch,
        "precision": precision,
        "implementation": implementation,
    }
    r = resolve(scenario({"name": "norm", "model": MODEL, "training": training}))
    events = build_events(r, build_inventory(r), 0)
    return [(e.moment, e.nbytes) for e in events if e.part == FINAL_NORM and e.alloc]


@pytest.mark.parametrize(
    ("dtype", "batch", "expected"),
    [
        ("fp32", 1, 4 * 128 * 64 * 4),  # four fp32 [128, 64] tensors: 131,072 B
        ("bf16", 1, 5 * 128 * 64 * 4),  # and the gradient cast up to fp32: 163,840 B
        ("bf16", 2, 5 * 2 * 128 * 64 * 4),  # two sequences a micro-batch: 327,680 B
    ],
)
def test_huggingface_rmsnorm_s_backward_holds_its_fp32_working_set(dtype, batch, expected):
    assert final_norm_bytes(dtype, "huggingface", batch) == [
        ("backward: final norm and head", expected)
    ]


def test_megatron_s_fused_norm_holds_none():
    assert final_norm_bytes("bf16", "megatron") == []
