"""`model.family` against the keys under `implementation: huggingface`.

Under `megatron` and `torchtitan` the family is a label: those codes build what the keys say.
Under `huggingface` it names transformers' class, and that class fixes the norm, the positions
and the MLP whatever the keys say: LlamaForCausalLM (and every Llama-style family tiersim
reads: config/hffamilies.py) has RMSNorm, rotary positions and a gated MLP
(modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding, LlamaMLP's gate_proj); GPT-2's
GPT2LMHeadModel has LayerNorm, a learned position table (`wpe`) and a GeLU MLP. The family
also decides the listing there (gpt2's c_attn, phi3's fused projections: state/
held_layout.py) while the keys decide the accounting (state/activations.py `hf_style`: by the
norm), so a contradiction would count one model's activations over another's tensors: refused
(exit 2), as `tiersim measure` refuses to build it (groundtruth/hfmodels.py `family_of`).
"""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

_LLAMA_LIKE = {"norm": "rmsnorm", "position": "rope", "gated_mlp": True}
# (transformers class, what it holds) for each family whose class fixes these keys
FIXED: dict[str, tuple[str, dict[str, object]]] = {
    "gpt2": ("GPT2LMHeadModel", {"norm": "layernorm", "position": "learned", "gated_mlp": False}),
    **{
        name: (cls, _LLAMA_LIKE)
        for name, cls in (
            ("llama", "LlamaForCausalLM"),
            ("mistral", "MistralForCausalLM"),
            ("qwen2", "Qwen2ForCausalLM"),
            ("qwen3", "Qwen3ForCausalLM"),
            ("mixtral", "MixtralForCausalLM"),
            ("qwen2_moe", "Qwen2MoeForCausalLM"),
            ("qwen3_moe", "Qwen3MoeForCausalLM"),
            ("deepseek_v2", "DeepseekV2ForCausalLM"),
            ("deepseek_v3", "DeepseekV3ForCausalLM"),
            ("gemma2", "Gemma2ForCausalLM"),
            ("gemma3_text", "Gemma3ForCausalLM"),
            ("phi3", "Phi3ForCausalLM"),
        )
    },
}


def family_problems(s: Scenario) -> list[Problem]:
    """Each key contradicting the class `model.family` names under `huggingface`."""
    m = s.model
    if s.training.implementation != "huggingface" or m.family not in FIXED:
        return []
    cls, fixed = FIXED[m.family]
    return [
        Problem(
            f"model.{key}",
            f"is {_spelled(getattr(m, key))}, but model.family {m.family} under "
            f"implementation: huggingface is transformers' {cls}, which has "
            f"{key}: {_spelled(want)} whatever the key says (expected {key}: "
            f"{_spelled(want)}, or another family, or implementation: megatron)",
            "E-CONFLICT",
        )
        for key, want in fixed.items()
        if getattr(m, key) != want
    ]


def _spelled(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
