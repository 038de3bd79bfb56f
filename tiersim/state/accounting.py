"""The accounting a scenario asks for (state/activation_kinds.py `Accounting`): the modelling
code, the attention kernel, dropout, the compute precision, the device, what recompute keeps
and how the loss is chunked."""

from __future__ import annotations

from tiersim.config.kv_head_split import megatron_core_gathers
from tiersim.config.loss_chunks import DEFAULT_LOSS_CHUNKS
from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.state.activation_kinds import DEFAULT_KERNEL, MEGATRON_DROPOUT, Accounting


def accounting_for(s: Scenario, device: str = "cuda") -> Accounting:
    """The scenario's accounting; unset kernel and dropout take the implementation's defaults
    (a generic model, without norm or dimensions, is read as Llama-style code)."""
    impl, spec = s.training.implementation, s.model
    gpt2 = spec.norm == "layernorm" and spec.parameters is None
    fallback = MEGATRON_DROPOUT if impl == "megatron" or gpt2 else 0.0
    attn, hidden = spec.attention_dropout, spec.hidden_dropout
    kernel = s.training.attention_kernel or DEFAULT_KERNEL[impl]
    return Accounting(
        implementation=impl,
        kernel=kernel,
        attention_dropout=fallback if attn is None else attn,
        hidden_dropout=fallback if hidden is None else hidden,
        compute_bytes=PRECISION_BYTES[s.training.precision.compute_precision],
        device=device,
        recompute_modules=tuple(s.training.recompute_modules or ()),
        recompute_every=s.training.recompute_every or 1,
        fp8_linears=s.training.fp8 is not None and impl == "megatron",
        core_checkpointed=core_checkpointed(impl, s.training.framework, kernel),
        loss_chunks=s.training.loss_chunks or DEFAULT_LOSS_CHUNKS[impl],
        recompute=s.training.recompute,
        kv_heads_held=_kv_heads_held(s),
    )


def core_checkpointed(implementation: str, framework: str | None, kernel: str) -> bool:
    """Whether selective recompute's checkpoint holds the attention core (state/activation_policy.py
    cites each): Megatron-Core's whatever the kernel; Megatron-DeepSpeed's (framework: deepspeed
    with Megatron's layer) its classic (eager) attention only, FlashAttention running outside;
    transformers' layers under tiersim's checkpoint (state/hf_selective.py) whatever the kernel;
    torchtitan's layer has no core checkpoint of its own (its SDPA keeps what it saves)."""
    if implementation == "megatron":
        return framework != "deepspeed" or kernel == "eager"
    return implementation == "huggingface"


def _kv_heads_held(s: Scenario) -> int:
    """t where Megatron-Core's layers gather the QKV output (t > kv heads under its tensor
    parallelism, config/kv_head_split.py: each rank keeps one KV head); else 0."""
    return s.parallel.tensor if megatron_core_gathers(s) else 0
