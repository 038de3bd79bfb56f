"""What a layer keeps beyond Korthikanti et al.'s default policies: Megatron-Core's recompute
modules (`training.recompute_modules`), and DeepSeek-V3's multi-token-prediction modules on the
last stage (`model.mtp_layers`). tiersim/state/activations.py uses both."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item
from tiersim.state.layer_sac import checkpointed_share

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape

# Megatron-Core's recompute modules (--recompute-modules) and the tensors of its layer
# (megatron_layer) each one no longer keeps, under its Transformer Engine layer spec, the one
# tiersim's megatron accounting means (Megatron-LM's `--transformer-impl` default, NeMo's;
# state/activations_fp8.py). That spec fuses a dense layer's two norms into the next linear
# (gpt_layer_specs.py `get_gpt_layer_with_transformer_engine_submodules`, NVIDIA/Megatron-LM
# at 00611e6e: `linear_qkv` and `linear_fc1` TELayerNormColumnParallelLinear, no
# `input_layernorm`, `pre_mlp_layernorm=... if num_experts else IdentityOp`); TE's
# `_LayerNormLinear` keeps both the norm's input and its output `ln_out`, the GEMM's input
# (layernorm_linear.py `ctx.save_for_backward(inputmat, ..., ln_out, ...)`, NVIDIA/
# TransformerEngine at 0004dbd0), so without recompute the items are Korthikanti's. A norm
# stays its own module (TENorm) only before an MoE block and before unfused latent attention
# (the same function). TransformerLayer (transformer_layer.py `__init__`, `_forward_mlp`,
# read at Victarry/Megatron-LM 0bd65906, a fork of NVIDIA's main): core_attn the s x s terms
# (Korthikanti et al. §5); mlp (`recompute_mlp`, dense layers only) checkpoints `self.mlp`
# over `pre_mlp_layernorm_output`, which the IdentityOp leaves as the residual stream (the
# post-attention norm input, which fc1 kept anyway): the MLP's wide tensors and fc1's `ln_out`
# (the mlp input) go; moe the router's and the experts' tensors; layernorm
# (`recompute_input_layernorm`, `recompute_pre_mlp_layernorm`, each only `if not
# isinstance(norm, IdentityOp)`) discards a separate norm's output (CheckpointWithoutOutput)
# and reruns it from its input: nothing in a dense layer with standard attention.
MODULE_ITEMS = {
    "mlp": ("mlp wide tensors", "mlp input"),
    "moe": (
        "router probabilities, top-k weights and indices",
        "dispatched rows, experts' wide tensors and outputs",
    ),
    "layernorm": ("qkv projection input", "mlp input"),
    "mla_up_proj": ("q, k, v (up-projected)",),  # from the latents, which stay
}
QKV_INPUT, MLP_INPUT = "qkv projection input", "mlp input"


def separate_norms(m: TransformerShape, index: int) -> tuple[bool, bool]:
    """Under the TE layer spec (above): whether layer `index`'s input norm and pre-MLP norm
    are modules of their own (latent attention's input norm; an MoE layer's pre-MLP norm)
    rather than fused into the linear that follows."""
    return m.mla is not None, m.is_moe(index)


def dropped_items(modules: tuple[str, ...], separate: tuple[bool, bool]) -> set[str]:
    """The items `modules` no longer keep in a layer whose norms are `separate`
    (`separate_norms`): layernorm a separate norm's output only, mlp (a dense layer's) its
    wide tensors and fc1's fused norm output."""
    norm_outputs = {QKV_INPUT: separate[0], MLP_INPUT: separate[1]}
    out: set[str] = set()
    for module in modules:
        if module == "layernorm":
            out |= {name for name, own in norm_outputs.items() if own}
        elif module == "mlp":
            out |= {"mlp wide tensors"} | (set() if separate[1] else {MLP_INPUT})
        else:
            out |= set(MODULE_ITEMS.get(module, ()))
    return out


# Megatron-Core checkpoints the whole core attention whatever the kernel (attention.py
# `_checkpointed_attention_forward`: tensor_parallel.checkpoint over query, key, value, the mask
# and the rotary embedding, NVIDIA/Megatron-LM megatron/core/transformer/attention.py at
# f41b4fd4; `forward` calls it `if self.checkpoint_core_attention and self.training`, at
# 00c2c0ad), under `recompute_granularity == 'selective'` with "core_attn" among
# `recompute_modules`, its default (transformer_config.py at 002526d8: 'default:
# ["core_attn"]', "core_attn" by "normal checkpointing"). Its TEDotProductAttention calls TE's
# DotProductAttention.forward without `checkpoint_core_attention` (TE's own checkpoint left
# off): Megatron's checkpoint wraps the TE call. Its CheckpointFunction runs the function
# under torch.no_grad() and saves its inputs alone (tensor_parallel/random.py at cf547dea), so
# it keeps q, k and v and recomputes the rest: a fused kernel's fp32 log-sum-exp (in bf16
# training as under FP8) and its output. That output is the out-projection's
# input, which a bf16 linear keeps itself; Transformer Engine's FP8 linear keeps only its FP8
# copy (state/activations_fp8.py), so under FP8 the bf16 output goes too
# (docs/nemo-memory.md). Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed
# megatron/model/transformer.py at 1e3fc81d, ParallelAttention) sets
# `checkpoint_core_attention` only without FlashAttention and calls `core_attention_flash`
# outside any checkpoint: under flash it keeps the kernel's saved tensors and its backward
# reruns nothing of the core (`Accounting.core_checkpointed` False, state/accounting.py); with
# its sequence parallelism (DeepSpeed-Ulysses) `dist_attn` runs outside it whatever the kernel.
# Under context parallelism Megatron-Core's checkpointed core holds TE's K/V exchange, rerun
# with it (workload/context.py `rerun_share`). What
# the layer keeps (`kept`) and what its backward reruns (workload/kernels.py
# `selective_recompute`, workload/stage_times.py) read that one field through `core_recomputed`.
FP8_OUT_PROJECTION = "out-projection input (FP8 copy)"
OUT_PROJECTION_INPUT = "out-projection input"
LOGSUMEXP = "logsumexp (fp32)"


def reruns_core(modules: tuple[str, ...], core_checkpointed: bool) -> bool:
    """Whether selective recompute reruns the attention core: its checkpoint holds the core
    (`core_checkpointed`) and `modules` (training.recompute_modules) are none or name it."""
    return core_checkpointed and (not modules or "core_attn" in modules)


def core_recomputed(acc: Accounting) -> bool:
    """The scenario's decision, under `training.recompute: selective` (False otherwise)."""
    return acc.recompute == "selective" and reruns_core(
        acc.recompute_modules, acc.core_checkpointed
    )


def kept(
    items: list[Item],
    recompute: str,
    modules: tuple[str, ...] = (),
    core_checkpointed: bool = True,
    separate: tuple[bool, bool] = (False, False),
) -> list[Item]:
    """Selective recompute (Korthikanti et al. §5) recomputes the attention core where its
    checkpoint holds it (`reruns_core`): its s×s terms, a fused kernel's log-sum-exp and,
    under TE's FP8 linears, its output; with `modules` (training.recompute_modules), what
    those modules hold instead (the core with core_attn); `separate`: which norms are
    modules of their own (`separate_norms`)."""
    if recompute != "selective":
        return list(items)
    dropped = dropped_items(modules, separate)
    core = reruns_core(modules, core_checkpointed)
    if core:
        dropped.add(LOGSUMEXP)
        if any(i.name == FP8_OUT_PROJECTION for i in items):
            dropped.add(OUT_PROJECTION_INPUT)
    return [i for i in items if not ((core and i.scores) or i.name in dropped)]


def mtp_items(
    m: TransformerShape, layer: list[Item], s: int, b: int, acc: Accounting
) -> list[Item]:
    """Each MTP module keeps what a layer like the last keeps (its tensors named 'MTP ...'),
    and its two norms' inputs and the projection's 2h-wide input (2·sbh each, replicated
    across tensor ranks unless sequence-parallel); `layer`: that layer's items. Recompute as
    Megatron-Core's module runs it (state/mtp.py cites it): selective, the layer as the
    model's layers (`kept`); full, one checkpoint a module whose inputs, the hidden states
    and the embedding's output, are the norms' inputs (on 1/N of them under recompute_every N,
    the rest keeping all, as the layers: state/layer_sac.py)."""
    dt, t, h, d = acc.compute_bytes, s * b, m.hidden, m.mtp_layers
    inputs = Item("norms", "MTP norm inputs (embedding, hidden)", d * 2.0 * dt * t * h, False)
    own = [inputs, Item("attention_inputs", "MTP projection input", d * 2.0 * dt * t * h, False)]
    separate = separate_norms(m, m.layers - 1)
    layer = kept(layer, acc.recompute, acc.recompute_modules, acc.core_checkpointed, separate)
    whole = own + [Item(i.group, f"MTP {i.name}", d * i.nbytes, i.split, i.scores) for i in layer]
    if acc.recompute != "full":
        return whole
    share = checkpointed_share(acc.recompute_every)
    return [inputs] + [replace(i, nbytes=(1.0 - share) * i.nbytes) for i in whole[1:] if share < 1]
