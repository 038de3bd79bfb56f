"""Activations as real `transformers` models keep them, measured here, against tiersim's
`huggingface` accounting (tiersim.state.activations) for the CPU they run on.

The measurement is this file's own: a transformers model built from its config class, random
weights, one forward in train mode with labels under `torch.autograd.graph.saved_tensors_hooks`;
every saved storage counted once at its full size, parameters and buffers left out; a storage
saved inside exactly one decoder layer belongs to that layer, anything else (token ids, rotary
tables shared by every layer, final norm, the loss) is outside. tiersim's prediction must be
within 1 % per layer and outside (it is exact on torch 2.13 / transformers 5.x).

The matrix: GPT-2, Llama, Mistral and Qwen2 x eager / sdpa x dropout 0 / 0.1 x fp32 / bf16 x
(s, b) = (32, 1) and (16, 2); Llama-style models with 4 heads and 2 key/value heads.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (`measure` extra)")

from tiersim.state.activation_kinds import by_group  # noqa: E402
from tiersim.state.activations import (  # noqa: E402
    Accounting,
    layer_bytes,
    layer_items,
    outside_items,
)
from tiersim.state.model import Transformer  # noqa: E402

H, A, KV, F, V, L = 64, 4, 2, 96, 128, 2
SHAPES = [(32, 1), (16, 2)]
FAMILIES = ["gpt2", "llama", "mistral", "qwen2"]


def hf_model(family: str, kernel: str, dropout: float, dtype) -> torch.nn.Module:
    if family == "gpt2":
        cfg = transformers.GPT2Config(
            n_embd=H, n_head=A, n_layer=L, n_positions=64, n_inner=F, vocab_size=V,
            attn_pdrop=dropout, resid_pdrop=dropout, embd_pdrop=dropout,
        )  # fmt: skip
        cls = transformers.GPT2LMHeadModel
    else:
        config, cls = {
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        }[family]
        cfg = config(
            hidden_size=H, num_attention_heads=A, num_key_value_heads=KV, intermediate_size=F,
            num_hidden_layers=L, vocab_size=V, max_position_embeddings=64,
            attention_dropout=dropout,
        )  # fmt: skip
    cfg._attn_implementation = kernel
    torch.manual_seed(0)
    return cls(cfg).to(dtype).train()


def saved_bytes(net: torch.nn.Module, ids: torch.Tensor) -> tuple[list[int], int]:
    """(bytes per layer, bytes outside the layers) autograd keeps for one forward."""
    layers = net.transformer.h if family_is_gpt2(net) else net.model.layers
    skip = {t.untyped_storage().data_ptr() for t in [*net.parameters(), *net.buffers()]}
    seen: dict[int, tuple[int, set[int]]] = {}
    where = [-1]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            seen.setdefault(ptr, (t.untyped_storage().nbytes(), set()))[1].add(where[0])
        return t

    hooks = [
        h
        for i, layer in enumerate(layers)
        for h in (
            layer.register_forward_pre_hook(lambda *_, i=i: where.__setitem__(0, i)),
            layer.register_forward_hook(lambda *_: where.__setitem__(0, -1)),
        )
    ]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = net(input_ids=ids, labels=ids, use_cache=False).loss
    for h in hooks:
        h.remove()
    per_layer = [0] * len(layers)
    outside = 0
    for nbytes, inside in seen.values():
        if len(inside) == 1 and min(inside) >= 0:
            per_layer[min(inside)] += nbytes
        else:
            outside += nbytes
    del loss
    return per_layer, outside


def family_is_gpt2(net) -> bool:
    return hasattr(net, "transformer")


def tiersim_model(family: str) -> Transformer:
    gpt2 = family == "gpt2"
    return Transformer(
        layers=L, hidden=H, heads=A, kv_heads=A if gpt2 else KV, head_dim=H // A,
        ffn_hidden=F, vocab=V, max_positions=64, gated_mlp=not gpt2, tied_embeddings=gpt2,
        qkv_bias=gpt2 or family == "qwen2", attn_out_bias=gpt2, mlp_bias=gpt2,
        norm="layernorm" if gpt2 else "rmsnorm", position="learned" if gpt2 else "rope",
    )  # fmt: skip


CASES = list(itertools.product(FAMILIES, ["eager", "sdpa"], [0.0, 0.1], ["fp32", "bf16"]))


@pytest.mark.parametrize(("family", "kernel", "dropout", "dtype"), CASES)
def test_measured_equals_predicted(family, kernel, dropout, dtype):
    torch.set_num_threads(1)
    net = hf_model(family, kernel, dropout, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
    m = tiersim_model(family)
    hidden_dropout = dropout if family == "gpt2" else 0.0
    width = 4 if dtype == "fp32" else 2
    acc = Accounting("huggingface", kernel, dropout, hidden_dropout, width, device="cpu")
    for s, b in SHAPES:
        torch.manual_seed(1)
        per_layer, outside = saved_bytes(net, torch.randint(0, V, (b, s)))
        assert per_layer[0] == per_layer[1]
        want_layer = layer_bytes(m, s, b, acc)
        want_outside = sum(i.nbytes for i in outside_items(m, s, b, acc))
        assert want_layer == pytest.approx(per_layer[0], rel=0.01), (s, b)
        assert want_outside == pytest.approx(outside, rel=0.01), (s, b)
        total = L * per_layer[0] + outside
        assert L * want_layer + want_outside == pytest.approx(total, rel=0.01)


def test_groups_add_up_and_name_what_dominates():
    """bf16 Llama, eager, s = 32, b = 1: the fp32 softmax (4·b·a·s² = 16,384 B) is the
    attention core's largest piece; the log-softmax of the logits, 4·s·b·V = 16,384 B."""
    m = tiersim_model("llama")
    acc = Accounting("huggingface", "eager", 0.0, 0.0, 2, "cpu")
    items = layer_items(m, 32, 1, acc)
    groups = by_group(items)
    assert sum(groups.values()) == layer_bytes(m, 32, 1, acc)
    softmax = next(i for i in items if i.name == "softmax output")
    assert softmax.nbytes == 4 * 1 * 4 * 32 * 32
    outside = outside_items(m, 32, 1, acc)
    loss = next(i for i in outside if i.name.startswith("log-softmax"))
    assert loss.nbytes == 4 * 32 * 1 * V


LLAMA_TINY = {
    "layers": L, "hidden": H, "heads": A, "kv_heads": KV, "ffn_hidden": F, "vocab": V,
    "gated_mlp": True, "norm": "rmsnorm", "position": "rope",
}  # fmt: skip
GPT2_TINY = {
    "layers": L, "hidden": H, "heads": A, "ffn_hidden": F, "vocab": V, "max_positions": 64,
    "tied_embeddings": True, "qkv_bias": True, "attn_out_bias": True, "mlp_bias": True,
}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "kernel", "dropout"),
    [(LLAMA_TINY, "eager", "0.1"), (GPT2_TINY, "sdpa", "0.1"), (GPT2_TINY, "eager", "0")],
)
def test_measure_runs_transformers_and_every_class_agrees(tmp_path, capsys, model, kernel, dropout):
    """`tiersim measure --implementation huggingface`: weights, gradients and optimizer state
    of the real tensors equal the inventory's; activations (layers and outside) the accounting's
    for the CPU, within 1 %. Expected: the bytes torch reports in this run."""
    import json

    import yaml

    from tiersim.cli import main

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(model))
    args = ["measure", "--model", str(path), "--implementation", "huggingface", "--device",
            "cpu", "--attention", kernel, "--dropout", dropout, "--seq-len", "16",
            "--micro-batch-size", "2", "--format", "json"]  # fmt: skip
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)
    for cls in ("weights", "gradients", "optimizer", "master"):
        c = got["classes"][cls]
        assert c["measured_bytes"] == c["predicted_bytes"], cls
    acts = got["classes"]["activations"]
    assert acts["predicted_bytes"] == pytest.approx(acts["measured_bytes"], rel=0.01)
    a = got["activations"]
    assert a["predicted_per_layer_bytes"] == pytest.approx(a["per_layer_bytes"][0], rel=0.01)
    assert a["predicted_outside_layers_bytes"] == pytest.approx(a["outside_layers_bytes"], rel=0.01)
    assert got["configuration"]["implementation"] == "huggingface"
