"""Latent attention as transformers 5 DeepseekV3Attention keeps it, measured here, against the
`huggingface` accounting (tiersim.state.activations_mla) for the CPU it runs on.

The measurement is test_hf_activations.py's (saved_tensors_hooks, each storage once at its full
size, parameters and buffers left out, a storage saved in exactly one decoder layer belongs to
that layer); the model is a tiny DeepseekV3ForCausalLM with dense MLPs only
(first_k_dense_replace = layers: DeepSeek-V3's MoE, shared experts without a gate, stays
refused), random weights. Prediction and measurement agree to the byte, per layer and outside.

The matrix: eager / sdpa x fp32 / bf16 x q_lora_rank 20 / none (V2-Lite's plain q projection) x
(s, b) = (32, 1) and (16, 2); qk_nope 16 + qk_rope 8, v 12 (query and value widths differ, as
in every DeepSeek config), kv_lora_rank 24, interleaved rotary (DeepSeek-V3's default) for
q_lora_rank 20 and rotate_half for none; besides, SDPA with the value as wide as query and key
(v 24: the CPU's flash kernel instead of the math path) and eager with attention dropout 0.1.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (`measure` extra)")

from test_hf_activations import saved_bytes  # noqa: E402

from tiersim.state.activations import Accounting, layer_bytes, outside_items  # noqa: E402
from tiersim.state.layers import Latent  # noqa: E402
from tiersim.state.model import Transformer  # noqa: E402

H, A, F, V, L = 64, 4, 96, 128, 2
KV_RANK, ROPE, NOPE, VDIM = 24, 8, 16, 12
SHAPES = [(32, 1), (16, 2)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def deepseek(kernel: str, dtype, q_rank: int | None, vdim=VDIM, drop=0.0) -> torch.nn.Module:
    cfg = transformers.DeepseekV3Config(
        hidden_size=H, num_attention_heads=A, num_key_value_heads=A, intermediate_size=F,
        num_hidden_layers=L, first_k_dense_replace=L, vocab_size=V, max_position_embeddings=64,
        q_lora_rank=q_rank, kv_lora_rank=KV_RANK, qk_rope_head_dim=ROPE,
        qk_nope_head_dim=NOPE, v_head_dim=vdim, rope_interleave=q_rank is not None,
        attention_dropout=drop,
    )  # fmt: skip
    cfg._attn_implementation = kernel
    torch.manual_seed(0)
    return transformers.DeepseekV3ForCausalLM(cfg).to(dtype).train()


def tiersim_deepseek(q_rank: int | None, vdim: int = VDIM) -> Transformer:
    return Transformer(
        layers=L, hidden=H, heads=A, kv_heads=A, head_dim=NOPE + ROPE, ffn_hidden=F, vocab=V,
        max_positions=64, gated_mlp=True, tied_embeddings=False, qkv_bias=False,
        attn_out_bias=False, mlp_bias=False, norm="rmsnorm",
        position="rope", mla=Latent(q_rank, KV_RANK, ROPE, NOPE, vdim),
    )  # fmt: skip


CASES = [(*case, VDIM, 0.0) for case in itertools.product(["eager", "sdpa"], DTYPES, [20, None])]
# value as wide as query and key (SDPA's flash kernel on the CPU), eager attention dropout
CASES += [("sdpa", dt, None, NOPE + ROPE, 0.0) for dt in DTYPES]
CASES += [("eager", dt, 20, VDIM, 0.1) for dt in DTYPES]


@pytest.mark.parametrize(("kernel", "dtype", "q_rank", "vdim", "drop"), CASES)
def test_measured_equals_predicted(kernel, dtype, q_rank, vdim, drop):
    torch.set_num_threads(1)
    net = deepseek(kernel, DTYPES[dtype], q_rank, vdim, drop)
    m = tiersim_deepseek(q_rank, vdim)
    acc = Accounting("huggingface", kernel, drop, 0.0, 4 if dtype == "fp32" else 2, device="cpu")
    for s, b in SHAPES:
        torch.manual_seed(1)
        per_layer, outside = saved_bytes(net, torch.randint(0, V, (b, s)))
        assert per_layer[0] == per_layer[1]
        assert layer_bytes(m, s, b, acc) == per_layer[0], (s, b)
        assert sum(i.nbytes for i in outside_items(m, s, b, acc)) == outside, (s, b)


def test_bf16_eager_layer_by_hand():
    """bf16, eager, q_lora_rank 20, s = 16, b = 2 (T = 32 tokens), written out:
    the projections' input 2·32·64 = 4,096; q_a_layernorm: fp32 input 4·32·20 = 2,560, 1/rms
    4·32 = 128, normalised and q_b_proj input 2·32·20 = 1,280 each; kv_a_layernorm: fp32 input
    4·32·24 = 3,072, 1/rms 128, normalised and kv_b_proj input 2·32·24 = 1,536 each; query and
    key 2·32·4·24 = 6,144 each; fp32 softmax 4·2·4·16² = 8,192 and its bf16 cast 4,096; the
    value copied for the batched matmul (b = 2) 2·32·4·12 = 3,072; o_proj input 2·32·48 = 3,072;
    SwiGLU MLP: input 4,096, four 2·32·96 = 6,144 tensors; the two RMSNorms 4·32·64 + 128 +
    2·32·64 = 12,416 each."""
    attention = 4096 + 2560 + 128 + 2 * 1280 + 3072 + 128 + 2 * 1536
    attention += 2 * 6144 + 8192 + 4096 + 3072 + 3072
    want = attention + 4096 + 4 * 6144 + 2 * 12416
    acc = Accounting("huggingface", "eager", 0.0, 0.0, 2, device="cpu")
    assert layer_bytes(tiersim_deepseek(20), 16, 2, acc) == want


SCENARIO = {
    "name": "mla",
    "model": {
        "layers": L, "hidden": H, "heads": A, "ffn_hidden": F, "vocab": V, "max_positions": 64,
        "norm": "rmsnorm", "position": "rope", "gated_mlp": True, "q_lora_rank": 20,
        "kv_lora_rank": KV_RANK,
        "qk_rope_head_dim": ROPE, "qk_nope_head_dim": NOPE, "v_head_dim": VDIM,
    },
    "training": {
        "implementation": "huggingface", "attention_kernel": "eager",
        "seq_len": 16, "micro_batch_size": 2,
    },
}  # fmt: skip


def test_a_latent_attention_scenario_is_accounted_under_huggingface():
    """The scenario is no longer refused, and its layer is the bf16 eager layer by hand above."""
    from engine_helpers import scenario

    from tiersim.state.inventory import layer_activation_bytes
    from tiersim.state.resolved import resolve

    r = resolve(scenario(SCENARIO))
    attention = 4096 + 2560 + 128 + 2 * 1280 + 3072 + 128 + 2 * 1536
    attention += 2 * 6144 + 8192 + 4096 + 3072 + 3072
    assert layer_activation_bytes(r, r.model) == attention + 4096 + 4 * 6144 + 2 * 12416


def test_deepseek_moe_stays_refused_under_huggingface():
    """Shared experts without a gate and without DeepSeek-V3's router groups (expert_groups:
    test_hf_deepseek_moe.py) are not the huggingface accounting's."""
    from engine_helpers import merge, scenario

    from tiersim.core.errors import InputError

    moe = {"experts": 8, "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_experts": 1}
    with pytest.raises(InputError, match="shared_experts"):
        scenario(merge(SCENARIO, {"model": moe}))
