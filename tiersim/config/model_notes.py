"""Notes on a model's keys: a transformer whose dimensions leave `position` or `norm` unset
takes GPT-2's learned positions and LayerNorm, which a Llama-like model described by its
dimensions gets silently wrong (6,755,459,072 parameters for Llama-2-7B, not 6,738,415,616)."""

from __future__ import annotations

from tiersim.config.schema import ModelSpec, Scenario
from tiersim.core.errors import Problem

# what each default adds to the count, in the note's words
_DEFAULTS = {
    "position": "position: learned (a table of max_positions x hidden parameters)",
    "norm": "norm: layernorm (a weight and a bias per norm)",
}
_BIASES = ("qkv_bias", "attn_out_bias", "mlp_bias")


def model_notes(scenario: Scenario) -> list[Problem]:
    """The notes on a transformer's keys: the defaults it took, and a sequence past the
    positions it was built for."""
    return (
        _default_notes(scenario)
        + _sequence_notes(scenario)
        + _code_notes(scenario)
        + _fp8_attention_notes(scenario)
    )


def _fp8_attention_notes(scenario: Scenario) -> list[Problem]:
    """`training.fp8` with no `attention_kernel` under `implementation: megatron`: attention is
    counted and timed as Megatron's eager layer (its default, Korthikanti et al.'s stored
    scores), but FP8 linears are Transformer Engine's, whose attention Megatron-LM runs fused by
    default (`--attention-backend auto`: FlashAttention or cuDNN, no scores kept;
    tiersim/frameworks/megatron.py reads a script without the flag as flash). Llama 3 8B at
    8,192 tokens, FP8 delayed, data 8 on dgx-h100: eager 9.354 s a step and 234.72 GB of HBM,
    flash 5.100 s and 97.31 GB."""
    tr = scenario.training
    if tr.fp8 is None or tr.attention_kernel is not None or tr.implementation != "megatron":
        return []
    if tr.framework not in (None, "megatron"):  # FSDP2's FP8 is torchao's: _code_notes
        return []
    if scenario.model.parameters is not None:  # a generic model: no attention to count
        return []
    why = (
        "not given: attention is counted and timed as Megatron's eager layer (implementation "
        "megatron's default: every score kept, seq_len^2 a head), but training.fp8's linears "
        "are Transformer Engine's, whose attention Megatron-LM runs fused by default "
        "(--attention-backend auto); set attention_kernel: flash for that, or eager to keep this"
    )
    return [Problem("training.attention_kernel", why, "W-DEFAULT")]


def _code_notes(scenario: Scenario) -> list[Problem]:
    """`framework: fsdp` with no `implementation`: the activations are counted for Megatron-LM's
    layer (the default, with its 0.1 dropouts where the model sets none), which no FSDP2 run
    executes: torchtitan's and transformers' layers keep other tensors (for Llama 3 8B at 8,192
    tokens under selective recompute, one GPU, bf16: torchtitan's 61.62 GB against megatron's
    36.51 GB, `inventory` of tests/fixtures/frameworks/llama3_8b.toml imported)."""
    tr = scenario.training
    if tr.framework != "fsdp" or "implementation" in tr.model_fields_set:
        return []
    if scenario.model.parameters is not None:  # a generic model: no layer to count
        return []
    why = (
        "not given: the activations are counted for Megatron-LM's layer (implementation "
        "megatron, the default), but FSDP2 (training.framework: fsdp) runs torchtitan's or "
        "transformers' model code; set implementation: torchtitan or huggingface to count theirs"
    )
    return [Problem("training.implementation", why, "W-DEFAULT")]


def _sequence_notes(scenario: Scenario) -> list[Problem]:
    """Rotary positions run past `max_positions` (a learned table cannot: refused in
    config/consistency.py), but the model was not trained there: said, not refused."""
    spec, seq = scenario.model, scenario.training.seq_len
    if seq is None or spec.max_positions is None or seq <= spec.max_positions:
        return []
    if spec.position != "rope":
        return []
    why = (
        f"{seq:,} tokens is past the model's max_positions {spec.max_positions:,} (rotary "
        "positions run there, as context extension does; the memory and time are counted)"
    )
    return [Problem("training.seq_len", why, "W-MODEL-LIMIT")]


def _default_notes(scenario: Scenario) -> list[Problem]:
    """The note on `position` / `norm` defaults a transformer took (none for a generic
    model, a shipped preset or an hf_config: each of those sets both)."""
    spec = scenario.model
    if spec.parameters is not None:
        return []
    unset = [key for key in _DEFAULTS if key not in spec.model_fields_set]
    if not unset:
        return []
    took = " and ".join(_DEFAULTS[key] for key in unset)
    why = f"{' and '.join(unset)} not given: took {took}, as GPT-2 has{_bias_remark(spec)}"
    return [
        Problem(
            "model",
            f"{why}; a Llama-like model sets position: rope and norm: rmsnorm",
            "W-DEFAULT",
        )
    ]


def _bias_remark(spec: ModelSpec) -> str:
    """GPT-2 also has every bias, which tiersim's defaults leave out: say so where none is set."""
    if any(key in spec.model_fields_set for key in _BIASES):
        return ""
    return (
        ", but no biases (qkv_bias, attn_out_bias and mlp_bias default to false; GPT-2 has all "
        "three)"
    )
