"""Which of a decoder layer's projections the model's code holds as one parameter tensor (q, k
and v; an MLP's gate and up, a shared expert's and each routed expert's), by the code
`training.implementation` and `training.framework`
name. Every per-tensor rule reads the layer's tensors so (state/model.py
`Transformer.qkv_as_one`, `gate_up_as_one`): FSDP2's per-parameter padding, DeepSpeed's
tensor-grain gradient buckets, ZeRO++'s qgZ calls and hpZ padding, ZeRO-3's persistence
threshold and module trace, the CPU optimizer's per-tensor cost, Muon's per-matrix work, the
FP8 casts of the largest linear. Totals do not change: only the tensor boundaries.

- `huggingface`: transformers' GPT-2 holds q, k, v in `c_attn` (modeling_gpt2.py
  `Conv1D(3 * self.embed_dim, self.embed_dim)`); Phi-3 holds `qkv_proj` [q + 2kv, h] and
  `gate_up_proj` [2f, h] (modeling_phi3.py); the other families hold them apart.
- `megatron` under framework megatron: Megatron-Core's GPT layer
  (NVIDIA/Megatron-LM @ 00caa53a). megatron/core/transformer/attention.py
  `SelfAttention.__init__`: `self.linear_qkv_out_dim = self.query_projection_size + 2 *
  self.kv_projection_size` (kv_channels x (num_attention_heads + 2 num_query_groups)), one
  `linear_qkv` of that many output rows, its bias where `add_bias_linear or add_qkv_bias`;
  megatron/core/transformer/mlp.py `MLP.__init__`: `if self.config.gated_linear_unit:
  ffn_hidden_size *= 2`, one `linear_fc1` [2f, h] (its bias [2f] where `add_bias_linear`),
  `linear_fc2` [h, f]. The Transformer Engine spec (megatron/core/models/gpt/
  gpt_layer_specs.py `get_gpt_layer_with_transformer_engine_spec`: `input_layernorm=
  IdentityOp`, `linear_qkv=TELayerNormColumnParallelLinear`) moves the norms' weights into
  those modules (`linear_qkv.layer_norm_weight`, `linear_fc1.layer_norm_weight`) as tensors
  of their own, the same [h]: the listing's norms stand. A shared expert is an MLP too
  (moe/shared_experts.py SharedExpertMLP(MLP)): its fc1 fused likewise.
- `megatron` under framework deepspeed: Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed
  @ 1e3fc81d, megatron/model/transformer.py): `ParallelAttention.__init__`
  `self.query_key_value = tensor_parallel.ColumnParallelLinear(config.hidden_size,
  projection_size + 2 * kv_projection_size, ...)`; `ParallelMLP.__init__`: `if
  config.gated_linear_unit: ffn_hidden_size *= 2`, one `dense_h_to_4h`, then
  `dense_4h_to_h`. The same shapes as Megatron-Core's.
- `megatron` under framework fsdp, and `torchtitan`: torchtitan's Llama (the code
  config/kv_head_split.py names there) holds wq, wk, wv and w1, w3 apart: as listed.
- `megatron` without a framework: no framework's per-tensor rule applies, and `tiersim
  measure` builds tiersim's own modules (groundtruth/torchmodels.py: q_proj, k_proj, v_proj,
  gate_proj, up_proj apart), which the listing stays.

Muon under framework megatron reads `linear_qkv` whole, as Megatron-Core's Muon does:
`get_megatron_muon_optimizer` builds `TensorParallelMuon(..., split_qkv=False)` ("TODO(deyuf):
support qkv split"; NVIDIA/Megatron-LM megatron/core/optimizer/muon.py at 025c931a).
Routed experts (moeheld) under a gated MLP, per local expert one [2f, h] and one [h, f]:
- framework megatron: NVIDIA/Megatron-LM @ 00caa53a. models/gpt/gpt_layer_specs.py
  `get_gpt_decoder_layer_specs` builds the MoE layer with `moe_grouped_gemm=
  config.moe_grouped_gemm` (transformer/transformer_config.py: `moe_grouped_gemm: bool =
  False`, `moe_use_legacy_grouped_gemm: bool = False`); the Transformer Engine provider
  (extensions/transformer_engine_spec_provider.py `grouped_mlp_modules`, read at 00771a14)
  gives SequentialMLP with TEColumnParallelLinear / TERowParallelLinear by default and
  TEGroupedMLP with TEColumnParallelGroupedLinear under --moe-grouped-gemm.
  transformer/moe/experts.py: `SequentialMLP.__init__` appends one `MLP(..., ffn_hidden_size=
  self.config.moe_ffn_hidden_size, is_expert=True)` per local expert (mlp.py: linear_fc1
  [2f, h] gated, linear_fc2 [h, f]); `TEGroupedMLP.__init__`: `ffn_hidden_size =
  moe_ffn_hidden_size; if gated_linear_unit: ffn_hidden_size *= 2`, one `linear_fc1(
  num_local_experts, hidden_size, ffn_hidden_size, ...)` and one `linear_fc2(num_local_experts,
  moe_ffn_hidden_size, hidden_size, ...)`, whose TE GroupedLinear registers `weight{i}`
  [out_features, in_features] per GEMM (NVIDIA/TransformerEngine @ 0069563f, pytorch/module/
  grouped_linear.py `GroupedLinear.__init__`; `out_features` divided by the tensor-parallel
  size under parallel_mode "column"). Both: the same tensors. The legacy GroupedMLP
  (`moe_use_legacy_grouped_gemm`, off by default, "will be deprecated soon") holds `weight1`
  [h, E_local x 2f / t] and `weight2` [E_local x f / t, h], one of each a rank: not modelled.
- framework deepspeed: Megatron-DeepSpeed (@ 1e3fc81d, megatron/model/transformer.py
  `ParallelTransformerLayer.__init__`: `self.mlp = MoE(args.hidden_size, ParallelMLP(config,
  moe=True, ...), num_experts=...)`) and DeepSpeed's `Experts` (deepspeed/moe/experts.py at
  microsoft/DeepSpeed 0e4271ad: `torch.nn.ModuleList([copy.deepcopy(expert) for i in
  range(num_local_experts)])`): each expert a ParallelMLP, `dense_h_to_4h` [2f, h] under
  swiglu.
Listed every expert's fc1, then every expert's fc2 (TEGroupedMLP's order of parameters;
SequentialMLP and DeepSpeed's Experts take them expert by expert, which moves only where a
bucket boundary or a prefetch falls inside a layer). Not counted: the experts' biases these
codes add under add_bias_linear (routed experts are listed without biases in every family).
Under `huggingface` the routed experts are transformers 5's fused 3-D tensors (state/sharding.py
`as_held`), and a model with experts is built as Mixtral or Qwen2-MoE (groundtruth/hfmodels.py
`family_of`), whose MLPs hold gate and up apart: Phi-3's gate_up_proj is not applied there.
Not changed: latent attention (Megatron-Core's MLASelfAttention holds its down and up
projections apart, as listed).
"""

from __future__ import annotations

from tiersim.config.schema import Scenario

# Megatron-Core (framework megatron) and Megatron-DeepSpeed (deepspeed) under implementation
# megatron: config/kv_head_split.py `tensor_parallel_code` names the same codes
MEGATRON_FRAMEWORKS = ("megatron", "deepspeed")


def held_fusions(s: Scenario, fused_qkv: bool, gated: bool) -> tuple[bool, bool]:
    """(q, k and v one tensor; gate and up one tensor) as the scenario's model code holds them
    (module docstring). `fused_qkv`: the family is GPT-2's or Megatron-LM's GPT."""
    impl = s.training.implementation
    if impl == "huggingface":
        phi3 = s.model.family == "phi3"
        return fused_qkv or phi3, phi3 and gated and s.model.experts is None
    if impl == "megatron" and s.training.framework in MEGATRON_FRAMEWORKS:
        return True, gated
    return False, False
