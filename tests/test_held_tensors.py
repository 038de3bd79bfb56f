"""Parameter tensors as the implementation holds them (gpt2held, issue 38): tiersim's listing
of a layer's tensors (Matrix, state/model.py) and FSDP2's shapes (state/fsdp.py) against the
`named_parameters()` of real transformers models built here from their config classes (tiny,
random weights, nothing downloads), one for one; and one per-tensor rule that moves with it,
ZeRO++ qgZ's collectives per GPT-2 layer, by hand.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (`measure` extra)")

from tiersim.config.hfconfig import dims_from_config  # noqa: E402
from tiersim.config.schema import ModelSpec, Scenario, Training  # noqa: E402
from tiersim.state.fsdp import gpt2_layer_shapes, model_shapes, padded_values  # noqa: E402
from tiersim.state.model import Matrix, Transformer, build_model  # noqa: E402
from tiersim.state.resolved import held_model  # noqa: E402
from tiersim.state.zeropp import held_tensors  # noqa: E402
from tiersim.workload.zeropp import qgz_calls  # noqa: E402

H, A, KV, F, V, L, P = 64, 4, 2, 96, 128, 2, 32


def _gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(n_embd=H, n_head=A, n_layer=L, n_positions=P, n_inner=F,
                                  vocab_size=V)  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg)


def _llama() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(
        hidden_size=H, num_attention_heads=A, num_key_value_heads=KV, intermediate_size=F,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=P,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg)


def _phi3() -> torch.nn.Module:
    cfg = transformers.Phi3Config(
        hidden_size=H, num_attention_heads=A, num_key_value_heads=KV, intermediate_size=F,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=P, pad_token_id=0,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return transformers.Phi3ForCausalLM(cfg)


NETS = {"gpt2": _gpt2, "llama": _llama, "phi3": _phi3}


def _tiersim(net: torch.nn.Module) -> Transformer:
    """tiersim's model of `net` as a scenario under implementation: huggingface resolves it
    (state/resolved.py `held_model`; test_resolve_lists_gpt2_qkv_as_one)."""
    spec = ModelSpec(**dims_from_config(net.config.to_dict()))
    model = build_model(spec)
    assert isinstance(model, Transformer)
    hf = Scenario.model_construct(model=spec, training=Training(implementation="huggingface"))
    return held_model(hf, model)


def _resolved(implementation: str):
    from tiersim import api
    from tiersim.state.resolved import resolve

    loaded = api.build(
        {"name": "g", "model": {"preset": "gpt2"}, "hardware": {"preset": "dgx-h100"},
         "training": {"implementation": implementation}}
    )  # fmt: skip
    return resolve(loaded.scenario)


def test_resolve_lists_gpt2_qkv_as_one_under_huggingface_only():
    # GPT-2 small (h 768): c_attn [768, 2304] one tensor under huggingface; under megatron
    # without a framework the listing keeps q, k, v apart (tiersim's own modules;
    # workload/cpu_optimizer.py counts them as one there); Megatron-Core's and
    # Megatron-DeepSpeed's fused ones: tests/test_megatron_held.py
    hf, mg = _resolved("huggingface").model, _resolved("megatron").model
    assert hf.qkv_as_one and not mg.qkv_as_one
    assert (768, 2304) in {(m.rows, m.cols) for m in hf.layer_matrices()}
    assert sum(m.count for m in hf.layer_matrices()) == 12
    assert sum(m.count for m in mg.layer_matrices()) == 16
    assert hf.parameters == mg.parameters == 124_439_808  # GPT-2 small, tied head


def _held(m: Matrix, conv1d: bool) -> list[tuple[int, ...]]:
    """The PyTorch shapes of a Matrix's tensors: a vector (rows,), an embedding or head
    [rows, cols], a weight as nn.Linear holds it [out, in] or as Conv1D does [in, out]."""
    if m.cols == 1:
        return [(m.rows,)] * m.count
    if m.embedding:
        return [(m.rows, m.cols)] * m.count
    shapes = [(b, a) if conv1d else (a, b) for a, b, n in m.linear_shapes() for _ in range(n)]
    return shapes


def _params(net: torch.nn.Module) -> Counter:
    return Counter(tuple(p.shape) for _, p in net.named_parameters())


@pytest.mark.parametrize("family", ["gpt2", "llama", "phi3"])
def test_held_tensors_are_the_models_parameters_one_for_one(family):
    # Phi-3 (modeling_phi3.py): qkv_proj [q + 2kv, h] and gate_up_proj [2f, h], one each
    net = NETS[family]()
    model = _tiersim(net)
    listed = Counter(s for m in model.all_matrices() for s in _held(m, family == "gpt2"))
    assert listed == _params(net)
    # the totals stay exact: as many values as the model has parameters
    assert model.parameters == sum(p.numel() for p in net.parameters())


def test_gpt2_layer_is_twelve_tensors_with_one_c_attn():
    # GPT2Block (modeling_gpt2.py): ln_1 (w, b), attn.c_attn (w [h, 3h], b [3h]),
    # attn.c_proj (w, b), ln_2 (w, b), mlp.c_fc (w, b), mlp.c_proj (w, b) = 12 tensors
    net = _gpt2()
    layer = [tuple(p.shape) for _, p in net.transformer.h[0].named_parameters()]
    assert len(layer) == 12 and (H, 3 * H) in layer and (3 * H,) in layer
    mats = _tiersim(net).layer_matrices()
    assert sum(m.count for m in mats) == 12
    assert Counter(s for m in mats for s in _held(m, True)) == Counter(layer)


@pytest.mark.parametrize("family", ["gpt2", "llama", "phi3"])
def test_fsdp2_shapes_are_the_models_parameters_in_order(family):
    # FSDP2 shards dim 0 (state/fsdp.py): Conv1D's is its input, nn.Linear's its output; the
    # root group's (embeddings, final norm, head) first, then the layers'; a tied head is one
    net = NETS[family]()
    real = Counter(
        (p.shape[0], p[0].numel() if p.dim() > 1 else 1) for _, p in net.named_parameters()
    )
    assert Counter((s.rows, s.row_values) for s in model_shapes(_tiersim(net))) == real


def test_gpt2_c_attn_pads_on_three_ranks_as_one_tensor():
    # c_attn's weight [64, 192] on 3 ranks: ceil(64 / 3) = 22 rows of 192 each = 4224 values
    # per rank; were q, k and v three [64, 64] tensors (nn.Linear [out, in]), 3 x 22 x 64 = 4224
    # too, but its bias [192] pads to 64 where three [64] biases pad to 3 x 22 = 66
    shapes = gpt2_layer_shapes(_tiersim(_gpt2()))
    # ln_1 (2 x 22), c_attn (22 x 192 + 64), c_proj (22 x 64 + 22), ln_2 (2 x 22),
    # c_fc (22 x 96 + 32), mlp.c_proj (32 x 64 + 22)
    by_hand = 44 + (4224 + 64) + (1408 + 22) + 44 + (2112 + 32) + (2048 + 22)
    assert padded_values(shapes, 3) == by_hand == 10020


def test_qgz_calls_per_gpt2_layer_are_the_twelve_tensors_twice():
    # ZeRO++ qgZ (workload/zeropp.py qgz_calls): a 2-D tensor's gradient whose values divide
    # by 2w in 4 all-to-alls (2 intra-node, 2 inter-node: values, then scales), a 1-D one in
    # 1 reduce-scatter fallback. GPT-2 layer on w = 16 ranks, g = 8 a node: c_attn [64, 192],
    # c_proj [64, 64], c_fc [64, 96], mlp.c_proj [96, 64] 2-D, each a multiple of 32 values
    # (4 x 4 = 16 calls); ln_1, ln_2 (w, b) and the 4 biases 1-D (8 x 1 = 8): 24 calls (34 with
    # q, k, v apart: 2 more weights and 2 more biases, 2 x 4 + 2 x 1 = 10 more)
    training = Training.model_validate({"implementation": "huggingface"})
    mats = _tiersim(_gpt2()).layer_matrices()
    shapes = [(a, b, n, count) for a, b, n, count, _ in held_tensors(training, mats)]
    calls = qgz_calls(shapes, 16, 8, 2)
    assert sum(count for _, count, _, _ in calls) == 24


def test_gpt2_under_huggingface_makes_24_qgz_calls_a_layer_in_the_step():
    # tests/test_qgz_calls.py's GPT-2 small over 16 GPUs (two nodes of 8) under huggingface:
    # a layer's c_attn [768, 2304], c_proj [768, 768], c_fc [768, 3072], mlp.c_proj
    # [3072, 768] (4 x 4) and 8 vectors: 24; the rest: wte and wpe (2 x 4), ln_f (w, b) 2:
    # 12 x 24 + 10 = 298 (under megatron 12 x 34 + 10 = 418, q, k, v listed apart)
    from engine_helpers import merge, scenario
    from test_zeropp import _raw

    from tiersim.state.resolved import resolve
    from tiersim.workload.work import build_workload

    raw = merge(
        _raw(zero_quantized_gradients=True), {"training": {"implementation": "huggingface"}}
    )
    wl = build_workload(resolve(scenario(raw)))
    calls = [c for u in wl.units for c in qgz_calls(u.grad_shapes, 16, 8, 2.0)]
    assert sum(count for _, count, _, _ in calls) == 298
