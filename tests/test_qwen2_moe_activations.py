"""The huggingface accounting of shared experts: transformers 5's Qwen2-MoE sparse block
(gated shared experts, norm_topk_prob false as its configs) measured on the CPU with
saved_tensors_hooks, each storage once, against tiersim's per-layer bytes, to the byte."""

from __future__ import annotations

import pytest
from conftest import scenario

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiersim.groundtruth.hfmodels import SavedStorages, layers_of  # noqa: E402
from tiersim.state.activations import accounting_for, layer_bytes  # noqa: E402
from tiersim.state.model import build_model  # noqa: E402

H, HEADS, KV, FE, FS, E, K, V, S = 64, 4, 2, 96, 160, 4, 2, 256, 32


def measured_per_layer(dtype) -> list[int]:
    transformers.logging.set_verbosity_error()
    cfg = transformers.Qwen2MoeConfig(
        hidden_size=H,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        intermediate_size=128,
        moe_intermediate_size=FE,
        shared_expert_intermediate_size=FS,
        num_experts=E,
        num_experts_per_tok=K,
        norm_topk_prob=False,
        vocab_size=V,
        num_hidden_layers=2,
        max_position_embeddings=64,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        attention_dropout=0.0,
        output_router_logits=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    net = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype).train()
    saved = SavedStorages(2, [*net.parameters(), *net.buffers()])
    saved.watch(layers_of(net))
    ids = torch.randint(0, V, (1, S))
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        net(input_ids=ids, labels=ids, use_cache=False)
    return saved.per_layer


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_qwen2_moe_layers_to_the_byte(dtype):
    model = {
        "hidden": H,
        "heads": HEADS,
        "kv_heads": KV,
        "layers": 2,
        "vocab": V,
        "ffn_hidden": 128,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
        "qkv_bias": True,
        "tied_embeddings": False,
        "experts": E,
        "experts_per_token": K,
        "expert_ffn_hidden": FE,
        "shared_experts": 1,
        "shared_expert_ffn_hidden": FS,
        "shared_expert_gate": True,
        "max_positions": 64,
    }
    precision = {"weights": dtype, "gradients": dtype, "master": "none", "optimizer": dtype}
    training = {"implementation": "huggingface", "attention_kernel": "sdpa", "seq_len": S}
    s = scenario({"name": "q", "model": model, "training": {**training, "precision": precision}})
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    predicted = layer_bytes(m, S, 1, acc)
    assert measured_per_layer(torch_dtype) == [predicted, predicted]
