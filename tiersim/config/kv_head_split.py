"""Tensor parallelism beyond the KV heads (`parallel.tensor` > `model.kv_heads`, a multiple of
them: config/layout_checks.py refuses the rest), as the code that applies the tensor
parallelism does it. Only Megatron-Core runs it; every other code tiersim names refuses it or
fails on it, so tiersim refuses it there (exit 2, E-CONFLICT at `parallel.tensor`).

Which code applies the tensor parallelism (`tensor_parallel_code`):
- `training.framework` megatron, or none (tiersim prices Megatron's tensor-parallel
  collectives), with `implementation: megatron`: Megatron-Core. It all-gathers the fused QKV
  output and keeps one KV head a rank (NVIDIA/Megatron-LM @ 00caa53a, attention.py
  `get_query_key_value_tensors`, the `num_query_groups < world_size` branch;
  workload/qkv_gather.py, state/qkv_gather_memory.py).
- framework deepspeed with implementation megatron: Megatron-DeepSpeed.
  microsoft/Megatron-DeepSpeed @ 1e3fc81d, megatron/model/transformer.py
  `ParallelAttention.__init__`: `num_key_value_heads_per_partition =
  core.utils.divide(config.num_key_value_heads, world_size)`, and `divide` asserts
  `numerator % denominator == 0`, "{} is not divisible by {}" (megatron/core/utils.py
  `ensure_divisibility`, as in NVIDIA/Megatron-LM @ 00611e6e): refused before the first step.
- framework deepspeed with another implementation: DeepSpeed's AutoTP training
  (`tensor_parallel.autotp_size`, frameworks/deepspeed_autotp.py). deepspeedai/DeepSpeed
  @ 0513f4a5, deepspeed/module_inject/layers.py `LinearLayer._tp_partition` in training mode:
  `torch.chunk(param, tp_world_size, dim=0)[tp_index]`, an even split of k_proj's and
  v_proj's k·e output rows whatever the heads (the head-aware `get_shard_size` of tp_shard.py
  is the inference path's `uneven_partition`): each rank gets k·e/t < e columns, and the model's
  reshape to heads of e (transformers' `view(*input_shape, -1, head_dim)`, torchtitan's
  `view(bs, seqlen, -1, head_dim)`) raises in the first forward. No assertion: a crash.
- implementation huggingface under framework fsdp (FSDP2, as torchtitan runs it), megatron
  or none: transformers' own plan (transformers 5.25.0,
  models/llama/configuration_llama.py `base_model_tp_plan`: k_proj and v_proj "colwise";
  Mistral's, Qwen2's, Qwen3's, Mixtral's and Qwen2-MoE's the same), applied by
  distributed/tensor_parallel.py `ColwiseParallel` (weight `Shard(0)`, an even split: "the
  output width need not divide by the TP size"), so again k·e/t < e columns a rank and
  modeling_llama.py's `self.k_proj(hidden_states).view(hidden_shape)` with `hidden_shape =
  (*input_shape, -1, self.head_dim)` raises. Its head-replicating style (`unit_colwise`:
  "Less heads than world size ... we replicate the heads") is in no plan of the models
  tiersim's huggingface accounting knows (MiniCPM5-MoE's only).
- framework fsdp with implementation torchtitan or megatron, or framework megatron or none
  with implementation torchtitan: torchtitan. pytorch/torchtitan @ 030c210c,
  torchtitan/models/llama3/model.py `Llama3Model.Config.update_from_config`: `if n_kv_heads
  % tp != 0: raise ValueError(f"tensor_parallel_degree ({tp}) must divide n_kv_heads
  ({n_kv_heads}).")`; before that check (@ 018740b7, model/model.py `Attention.forward`),
  `xk.view(bs, seqlen, -1, self.head_dim)` on k·e/t < e columns raised instead.
"""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

MEGATRON_CORE = "megatron-core"

# what each code does at t > k, said after "but"; {t}, {k}, {e}, {cols} filled in
_REFUSALS = {
    "megatron-deepspeed": (
        "Megatron-DeepSpeed refuses it: ParallelAttention divides num_key_value_heads by the "
        "tensor size, asserting '{k} is not divisible by {t}' (megatron/model/transformer.py)"
    ),
    "deepspeed-autotp": (
        "DeepSpeed's AutoTP training splits k_proj's and v_proj's rows evenly over the {t} "
        "ranks (module_inject/layers.py LinearLayer._tp_partition, torch.chunk): {cols} "
        "columns a rank, which the model's reshape to heads of {e} cannot take (a RuntimeError "
        "in the first forward)"
    ),
    "transformers": (
        "transformers' tensor-parallel plan shards k_proj and v_proj 'colwise' (an even split "
        "over the {t} ranks): {cols} columns a rank, which the attention's "
        "view(*input_shape, -1, head_dim) with head_dim {e} cannot take (a RuntimeError in the "
        "first forward)"
    ),
    "torchtitan": (
        "torchtitan refuses it: 'tensor_parallel_degree ({t}) must divide n_kv_heads ({k})' "
        "(torchtitan/models/llama3/model.py, update_from_config)"
    ),
}
_NAMES = {
    "megatron-deepspeed": "Megatron-DeepSpeed's",
    "deepspeed-autotp": "DeepSpeed AutoTP's",
    "transformers": "transformers' own",
    "torchtitan": "torchtitan's",
}


def tensor_parallel_code(s: Scenario) -> str:
    """Whose code splits the layers over `parallel.tensor` (module docstring)."""
    framework, impl = s.training.framework, s.training.implementation
    if framework == "deepspeed":
        return "megatron-deepspeed" if impl == "megatron" else "deepspeed-autotp"
    if impl == "huggingface":
        return "transformers"
    if framework == "fsdp" or impl == "torchtitan":
        return "torchtitan"
    return MEGATRON_CORE


def beyond_kv_heads(s: Scenario) -> bool:
    """parallel.tensor a multiple > 1 of the KV heads, in attention with its own K and V heads
    (latent attention has no such split: its K and V come from replicated latents)."""
    m, t = s.model, s.parallel.tensor
    kv = m.kv_heads or m.heads
    if not kv or m.kv_lora_rank is not None or t <= kv:
        return False
    return t % kv == 0  # neither dividing the other: layout_checks refuses it


def megatron_core_gathers(s: Scenario) -> bool:
    """Whether the layers take Megatron-Core's gather path (workload/qkv_gather.py)."""
    return beyond_kv_heads(s) and tensor_parallel_code(s) == MEGATRON_CORE


def _under(s: Scenario) -> str:
    """The keys that chose the code, as the message says them."""
    framework = s.training.framework or "not set"
    return f"training.framework {framework} and implementation {s.training.implementation}"


def kv_head_problems(s: Scenario) -> list[Problem]:
    """t > k where the code that applies tensor parallelism refuses it or fails on it."""
    if not beyond_kv_heads(s):
        return []
    code = tensor_parallel_code(s)
    if code == MEGATRON_CORE:
        return []
    m, t = s.model, s.parallel.tensor
    k = m.kv_heads or m.heads
    e = m.head_dim or m.hidden // m.heads
    cols = f"{k} x {e} / {t} = {k * e // t}" if (k * e) % t == 0 else f"{k} x {e} / {t}"
    rule = _REFUSALS[code].format(t=t, k=k, e=e, cols=cols)
    divisors = ", ".join(str(d) for d in range(1, k + 1) if k % d == 0)
    why = (
        f"is {t}, more than model.kv_heads ({k}); under {_under(s)} the tensor parallelism "
        f"is {_NAMES[code]}, and {rule} (expected a tensor size dividing the KV heads: "
        f"{divisors}; or training.framework megatron with implementation megatron, where "
        "Megatron-Core all-gathers the QKV output and keeps one KV head a rank)"
    )
    return [Problem("parallel.tensor", why, "E-CONFLICT")]
