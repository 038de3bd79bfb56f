"""What Transformer Engine's FP8 linears keep for backward (`training.fp8` under Megatron's
layer accounting): each TE linear saves its input as the FP8 cast it fed the GEMM, 1 B a value,
not the bf16 tensor (TE's `_Linear.forward`: under fp8, `saved_inputmat` is the FP8 `inputmat`
or its FP8 transpose `inputmat_t`; `_LayerNormLinear.forward` saves the norm's bf16 input and
its FP8 output `ln_out`; NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py
and layernorm_linear.py, commit 0004dbd0). Megatron-Core's TE layer spec builds the MLP as
TELayerNormColumnParallelLinear (FC1), its own activation and TERowParallelLinear (FC2), not
TE's LayerNormMLP: the activation keeps FC1's bf16 output (megatron/core/fusions/
fused_bias_swiglu.py and fused_bias_gelu.py, `ctx.save_for_backward(input...)`, in FP8 only
with `activation_func_fp8_input_store`, default False in transformer_config.py) and FC2 keeps
its input's FP8 cast; TE's LayerNormMLP keeps the same (`fc1_out` bf16, `gelu_out` FP8). Per
layer:

- the QKV input and the MLP input (the two norms' outputs, which no other op keeps): 1 B;
- the MLP's wide tensors: FC1's output stays in bf16 (the activation function keeps it), FC2's
  input (the activation's output) is kept as its FP8 cast only: (2 + 1) B a value, gated
  (2 x 2 + 1) B over the f-wide values (Korthikanti's 4sbf becomes 3sbf at bf16);
- the out-projection input is attention's output, which the attention kernel keeps in bf16 for
  its own backward: the linear's FP8 copy comes on top (+1 B a value).

Not counted here: the scales (one fp32 a tensor; mxfp8 1 B a 32 values), MoE experts' and
latent attention's linears (kept in bf16), and other implementations (torchao's Float8Linear
keeps the high-precision input; their accounting stays bf16). docs/fp8.md."""

from __future__ import annotations

from dataclasses import replace

from tiersim.state.activation_kinds import Accounting, Item

FP8_BYTES = 1.0
# the norms' outputs, saved only as the next linear's FP8 input
CAST_ONLY = ("qkv projection input", "mlp input")


def te_fp8_items(items: list[Item], acc: Accounting, gated: bool) -> list[Item]:
    """A Megatron layer's items with TE's FP8 saved inputs (module docstring); unchanged where
    `acc.fp8_linears` is off."""
    if not acc.fp8_linears:
        return items
    dt = acc.compute_bytes
    out: list[Item] = []
    for item in items:
        if item.name in CAST_ONLY:
            out.append(replace(item, nbytes=item.nbytes * FP8_BYTES / dt))
        elif item.name == "mlp wide tensors":
            wide = 3.0 if gated else 2.0  # values a token a unit of f: FC1 out (2 gated) + FC2 in
            out.append(
                replace(item, nbytes=item.nbytes * ((wide - 1) * dt + FP8_BYTES) / (wide * dt))
            )
        elif item.name == "out-projection input":
            fp8_copy = Item(
                item.group,
                "out-projection input (FP8 copy)",
                item.nbytes * FP8_BYTES / dt,
                item.split,
            )
            out += [item, fp8_copy]
        else:
            out.append(item)
    return out
