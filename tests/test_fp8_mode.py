"""FP8 training has one meaning, `training.fp8` (issue 39's review): Transformer Engine's FP8
linears, the compute copy and activations in bf16 but for the FP8 inputs TE's linears save, and
MFU against the compute copy's (bf16) peak. Expected values by hand in each test."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.report.utilization import utilization
from tiersim.state.activation_kinds import Accounting
from tiersim.state.activations import accounting_for, megatron_layer
from tiersim.state.transformer_shape import TransformerShape

# a small Llama-like layer: h 64, 4 heads of 16 (q 64 wide), 2 KV heads (kv 32), f 160, gated
SHAPE = TransformerShape(
    layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=160, vocab=256,
    max_positions=None, gated_mlp=True, tied_embeddings=False, qkv_bias=False,
    attn_out_bias=False, mlp_bias=False, norm="rmsnorm", position="rope",
)  # fmt: skip


def _bytes(acc: Accounting, shape: TransformerShape = SHAPE) -> dict[str, float]:
    return {i.name: i.nbytes for i in megatron_layer(shape, 8, 2, acc)}  # s 8, b 2: t = 16


def test_te_fp8_linears_keep_their_inputs_in_fp8_the_rest_in_bf16():
    bf16 = _bytes(Accounting(kernel="flash", attention_dropout=0.0, hidden_dropout=0.0))
    fp8 = _bytes(
        Accounting(kernel="flash", attention_dropout=0.0, hidden_dropout=0.0, fp8_linears=True)
    )
    t, h, q, f = 16, 64, 64, 160
    # the norms' outputs, kept only as the QKV and FC1 inputs: 2 B -> 1 B a value
    assert bf16["qkv projection input"] == 2 * t * h == 2048
    assert fp8["qkv projection input"] == 1 * t * h == 1024
    assert fp8["mlp input"] == 1 * t * h == 1024
    # gated MLP: FC1's 2f-wide output in bf16 (SwiGLU keeps it) + FC2's f-wide input in FP8
    assert bf16["mlp wide tensors"] == 3 * 2 * t * f == 15360
    assert fp8["mlp wide tensors"] == (2 * 2 + 1) * t * f == 12800
    # attention's output stays bf16 (the kernel keeps it); the projection's FP8 copy on top
    assert fp8["out-projection input"] == bf16["out-projection input"] == 2 * t * q
    assert fp8["out-projection input (FP8 copy)"] == 1 * t * q == 1024
    # q, k, v (attention keeps them), the norms' inputs, the log-sum-exp: unchanged
    for name in ("q", "k, v", "input norm input", "post-attention norm input"):
        assert fp8[name] == bf16[name]
    # whole layer: -t*h (qkv in) - t*h (mlp in) - t*f (FC2 in) + t*q (copy)
    # = -(1024 + 1024 + 2560) + 1024 = -3584 B
    assert sum(fp8.values()) - sum(bf16.values()) == -(t * h + t * h + t * f) + t * q == -3584


def test_an_ungated_mlp_keeps_fc1_output_in_bf16_and_fc2_input_in_fp8():
    gelu = TransformerShape(**{**SHAPE.__dict__, "gated_mlp": False})
    fp8 = _bytes(Accounting(kernel="flash", fp8_linears=True), gelu)
    assert fp8["mlp wide tensors"] == (2 + 1) * 16 * 160 == 7680  # GeLU input bf16, FC2 in FP8


def _default(*sets: str):
    return load_scenario(SCENARIOS / "default.yaml", list(sets)).scenario


def test_fp8_is_counted_only_under_megatron_s_te_layer():
    assert accounting_for(_default()).fp8_linears is False  # no training.fp8
    # default.yaml's implementation is megatron: Transformer Engine's linears
    assert accounting_for(_default("training.fp8.recipe=delayed")).fp8_linears is True
    hf = _default("training.fp8.recipe=tensorwise", "training.implementation=huggingface")
    assert accounting_for(hf).fp8_linears is False  # not TE: kept in bf16 (docs/fp8.md)


def test_mfu_under_training_fp8_is_against_the_bf16_peak():
    # NeMo/Megatron report model TFLOP/s a GPU; MFU divides it by the compute copy's (bf16)
    # dense peak, as FP8 runs are reported: h200-hbf gives bf16 989 TFLOP/s (fp8 1979)
    s = _default("training.fp8.recipe=delayed")
    u = utilization(s, SimpleNamespace(tokens_per_s=1.0e5))
    assert u["mfu"] == u["model_flops_per_s_per_gpu"] / 989e12
