"""A mixture-of-experts layer's routed experts as Megatron's code holds them (moeheld, issue 38;
state/held_layout.py): each expert's linear_fc1 (Megatron-Core) or dense_h_to_4h
(Megatron-DeepSpeed) one [2f, h] tensor under a gated MLP, then its [h, f], with the shapes
written out from the source; no framework, torchtitan's and transformers' listings unchanged;
the totals the same. Per-tensor rules that move with them, by hand: DeepSpeed ZeRO-3's
persistent parameters and its module trace, Muon's Newton-Schulz FLOPs.
"""

from __future__ import annotations

from collections import Counter

from conftest import scenario
from test_megatron_held import _shapes

from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import resolve
from tiersim.state.zero3_prefetch import zero3_gathers
from tiersim.state.zero3_trace import step_trace

# a small Mixtral-like MoE: h 64, 4 heads of 16 (no GQA), 4 routed experts of f 128, top 2,
# gated (SwiGLU), RMSNorm, no biases, untied, 2 layers, vocabulary 256
MOE = {
    "hidden": 64, "layers": 2, "heads": 4, "ffn_hidden": 128, "vocab": 256,
    "gated_mlp": True, "norm": "rmsnorm", "position": "rope", "tied_embeddings": False,
    "experts": 4, "experts_per_token": 2,
}  # fmt: skip


def _resolved(framework, implementation="megatron", model=MOE, **extra):
    training = {"seq_len": 32, "implementation": implementation, "framework": framework}
    return resolve(scenario({"name": "moe", "model": model, "training": training, **extra}))


def test_a_megatron_core_moe_layer_holds_each_experts_linear_fc1_whole():
    # NVIDIA/Megatron-LM @ 00caa53a, the Transformer Engine spec of an MoE layer:
    #   self_attention.linear_qkv.layer_norm_weight    [64]
    #   self_attention.linear_qkv.weight               [(4 + 2 x 4) x 16, 64] = [192, 64]
    #   self_attention.linear_proj.weight              [64, 64]
    #   pre_mlp_layernorm.weight                       [64]  (TENorm: num_experts given)
    #   mlp.router.weight                              [4, 64]
    #   mlp.experts: SequentialMLP (moe_grouped_gemm False, the default), each local expert
    #     an MLP: linear_fc1.weight [2 x 128, 64] = [256, 64], linear_fc2.weight [64, 128];
    #     TEGroupedMLP (--moe-grouped-gemm): linear_fc1.weight0..3 [256, 64] and
    #     linear_fc2.weight0..3 [64, 128], the same tensors
    # 2 + 1 + 1 + 1 + 4 + 4 = 13 tensors (19 with q, k, v and each gate and up apart)
    layer = _resolved("megatron").model.layer_matrices()
    assert sum(m.count for m in layer) == 13
    assert _shapes(layer) == Counter({(64,): 2, (192, 64): 1, (64, 64): 1, (4, 64): 1,
                                      (256, 64): 4, (64, 128): 4})  # fmt: skip
    # 12,288 + 4,096 + 256 + 4 x 16,384 + 4 x 8,192 + 2 x 64 = 115,072 values
    assert sum(m.size for m in layer) == 115_072
    # the four fc1 are routed experts' (split by expert parallelism), in the order listed
    fc1 = [m for m in layer if (m.rows, m.cols) == (64, 256)]
    assert len(fc1) == 1 and fc1[0].expert and fc1[0].down_every == 0


def test_a_megatron_deepspeed_moe_layer_holds_each_experts_dense_h_to_4h_whole():
    # microsoft/Megatron-DeepSpeed @ 1e3fc81d: MoE(hidden, ParallelMLP(config, moe=True)),
    # DeepSpeed's Experts a deepcopy of it per local expert: dense_h_to_4h [2 x 128, 64] under
    # swiglu, dense_4h_to_h [64, 128]; query_key_value [192, 64]
    layer = _resolved("deepspeed").model.layer_matrices()
    shapes = _shapes(layer)
    assert shapes[(256, 64)] == 4 and shapes[(64, 128)] == 4 and shapes[(192, 64)] == 1
    assert sum(m.count for m in layer) == 13


def test_no_framework_torchtitan_and_transformers_keep_their_listings_and_totals_stay():
    # no framework (tiersim's own modules) and fsdp (torchtitan): each expert's gate, up
    # [128, 64] and down [64, 128] apart, 3 x 4 = 12 tensors; q, k, v [64, 64] apart
    apart = Counter({(64,): 2, (64, 64): 4, (4, 64): 1, (128, 64): 8, (64, 128): 4})
    for framework in (None, "fsdp"):
        assert _shapes(_resolved(framework).model.layer_matrices()) == apart
    # transformers 5 (huggingface): the experts listed as before, held 3-D by sharding.as_held
    hf = [m for m in _resolved(None, "huggingface").model.layer_matrices() if m.expert]
    assert [(m.rows, m.cols, m.count, m.down_every) for m in hf] == [(64, 128, 12, 3)]
    # Phi-3's gate_up_proj is not applied to a model with experts (built as Mixtral there)
    phi3 = _resolved(None, "huggingface", {**MOE, "family": "phi3"}).model
    assert not phi3.gate_up_as_one
    # parameters: embedding 16,384 + 2 layers x 115,072 + final norm 64 + head 16,384
    totals = {
        _resolved(fw, impl).model.parameters
        for fw, impl in (("megatron", "megatron"), ("deepspeed", "megatron"), (None, "megatron"),
                         ("fsdp", "megatron"), (None, "huggingface"))
    }  # fmt: skip
    assert totals == {16_384 + 2 * 115_072 + 64 + 16_384}


def test_zero3_persistent_parameters_and_module_trace_by_hand():
    """Megatron-DeepSpeed under ZeRO-3 (2 data ranks), stage3_param_persistence_threshold
    10,000: a tensor of at most 10,000 values stays gathered all step.
    A layer's tensors: query_key_value 12,288 (over), dense 4,096, router 256, two norms 64.
    Before (gate, up and down apart): 12 expert tensors of 64 x 128 = 8,192, all under:
      4,096 + 256 + 12 x 8,192 + 2 x 64 = 102,784 a layer.
    Now: 4 dense_h_to_4h of 16,384 (over) and 4 dense_4h_to_h of 8,192 (under):
      4,096 + 256 + 4 x 8,192 + 2 x 64 = 37,248 a layer.
    The rest: the embedding and the head 256 x 64 = 16,384 each (over), the final norm 64.
    Persistent: 2 x 37,248 + 64 = 74,560 values (before 2 x 102,784 + 64 = 205,632)."""
    ds = {"stage3_param_persistence_threshold": 10_000}
    training = {"seq_len": 32, "framework": "deepspeed", "deepspeed": ds}
    mapping = {"name": "moe", "model": MOE, "training": training}
    r = resolve(scenario(mapping | {"parallel": {"data": 2, "zero_stage": 3}}))
    assert zero3_gathers(r, 0, 2).persistent == 74_560
    # the trace's parameters, one a module (state/zero3_trace.py), numbered the layers' first,
    # then the embedding, the final norm and the head: a layer's 12,288, 4,096, 256,
    # 4 x 16,384, 4 x 8,192, 64, 64 (13 modules where 17 before)
    layer = [12_288, 4_096, 256, *[16_384] * 4, *[8_192] * 4, 64, 64]
    trace = step_trace(r, 0)
    assert list(trace.numel) == [*layer, *layer, 16_384, 64, 16_384]
    # layer 0's forward fetches them in that order, after its four containers' empty fetches
    fetched = [trace.numel[p] for name, ps in trace.steps if name == "forward: layer 0" for p in ps]
    assert fetched == layer


def test_muons_newton_schulz_on_a_layers_experts_by_hand():
    """Muon's 5 Newton-Schulz iterations on an m x n matrix (m <= n): 5 x (4 m² n + 2 m³).
    Each expert's linear_fc1 [256, 64]: 5 x (4 x 64² x 256 + 2 x 64³) = 23,592,960; its
    linear_fc2 [64, 128]: 5 x (4 x 64² x 128 + 2 x 64³) = 13,107,200. The layer's 4 experts:
    4 x (23,592,960 + 13,107,200) = 146,800,640 FLOPs a step (gate, up and down apart, 12 x
    13,107,200 = 157,286,400)."""
    experts = [m for m in _resolved("megatron").model.layer_matrices() if m.expert]
    assert optimizer("muon").update_gemm_flops(experts) == 146_800_640
    apart = [m for m in _resolved(None).model.layer_matrices() if m.expert]
    assert optimizer("muon").update_gemm_flops(apart) == 157_286_400
