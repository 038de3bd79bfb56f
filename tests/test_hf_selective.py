"""Recompute in transformers' models, measured on one process against the `huggingface`
accounting (state/hf_selective.py), to the byte.

A tiny Llama (hidden 64, 4 heads of 16, 2 kv heads, MLP 128, vocab 128, 2 layers, fp32, s 32,
b 2: T = 64 tokens), random weights, built from its config class; recompute as `measure` runs
it (groundtruth/selective.py: the attention core under a non-reentrant checkpoint, or
transformers' layer checkpointing), and what autograd saves counted by `measure`'s own hooks
(groundtruth/hfmodels.py `SavedStorages`: each storage once, parameters left out, a storage
saved in more than one layer outside). The checkpoints' keyword arguments (the rotary tables,
the position ids, eager's causal mask), held by their closures, are saved beside them
(`held_checkpoint`), so the hooks see what a checkpoint holds.

The expected bytes are written out here:

- a layer at selective recompute, either kernel: input norm's fp32 input 4·T·h = 16,384, its
  1/rms 4·T = 256, its output 16,384; the post-attention norm's the same; q/k/v projection
  input 16,384; o_proj input 4·T·a·d = 16,384; the checkpoint's inputs q 4·T·a·d = 16,384 and
  K, V at the kv heads 2·4·T·2·16 = 16,384; MLP input 16,384; gate, SiLU, up, down input
  4·4·T·128 = 131,072: 279,040. No log-sum-exp (SDPA keeps 4·a·s·b = 1,024 B without
  recompute: 280,064) and no s x s term: all recomputed inside the checkpoint.
- a layer at full recompute: its input, 4·T·h = 16,384.
- outside: token ids 8·T = 512, rotary cos and sin 2·s·d·4 = 4,096, final norm 16,384 + 256 +
  16,384, head input 16,384, fp32 log-softmax 4·T·V = 32,768, labels 8·T + total weight 4 =
  516: 87,300; under recompute the position ids the checkpoints hold, 8·s = 256 (87,556), and
  under eager attention its causal mask, 4·b·s·s = 8,192 (95,748).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (`measure` extra)")

from tiersim.groundtruth import hfmodels  # noqa: E402
from tiersim.groundtruth.fsdp2_step import set_recompute  # noqa: E402
from tiersim.state.activations import Accounting, layer_bytes, outside_items  # noqa: E402
from tiersim.state.model import Transformer  # noqa: E402

S, B = 32, 2
OUTSIDE = 512 + 4_096 + (16_384 + 256 + 16_384) + 16_384 + 32_768 + 516
LAYER_SELECTIVE = 2 * (16_384 + 256 + 16_384) + 5 * 16_384 + 131_072  # 279,040
CASES = [  # kernel, recompute, bytes a layer, bytes outside
    ("sdpa", "none", LAYER_SELECTIVE + 1_024, OUTSIDE),
    ("sdpa", "selective", LAYER_SELECTIVE, OUTSIDE + 256),
    ("sdpa", "full", 16_384, OUTSIDE + 256),
    ("eager", "selective", LAYER_SELECTIVE, OUTSIDE + 256 + 8_192),
    ("eager", "full", 16_384, OUTSIDE + 256 + 8_192),
]


def llama(kernel: str) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        num_hidden_layers=2, vocab_size=128, max_position_embeddings=64,
    )  # fmt: skip
    cfg._attn_implementation = kernel
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).train()


def measured(net: torch.nn.Module, kernel: str, recompute: str) -> tuple[list[int], int, float]:
    """(bytes a layer, bytes outside, the loss) as `measure` counts them, one forward."""
    set_recompute(net, recompute, kernel)
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (B, S))
    saved = hfmodels.SavedStorages(2, [*net.parameters(), *net.buffers()])
    handles = saved.watch(hfmodels.layers_of(net))
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        loss = net(input_ids=ids, labels=ids, use_cache=False).loss
    saved.drop_freed()
    for h in handles:
        h.remove()
    loss.backward()  # the checkpoints recompute (and run) as they were saved
    return saved.per_layer, saved.outside, float(loss.detach())


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], tuple[list[int], int, float]]:
    torch.set_num_threads(1)
    nets = {kernel: llama(kernel) for kernel in ("sdpa", "eager")}
    return {(k, rc): measured(nets[k], k, rc) for k, rc, _, _ in CASES}


@pytest.mark.parametrize(("kernel", "recompute", "layer", "outside"), CASES)
def test_measured_and_predicted_equal_the_bytes_by_hand(runs, kernel, recompute, layer, outside):
    per_layer, got_outside, _ = runs[kernel, recompute]
    assert per_layer == [layer, layer]
    assert got_outside == outside
    m = Transformer(
        layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=128, vocab=128,
        max_positions=64, gated_mlp=True, tied_embeddings=False, qkv_bias=False,
        attn_out_bias=False, mlp_bias=False, norm="rmsnorm", position="rope",
    )  # fmt: skip
    acc = Accounting("huggingface", kernel, 0.0, 0.0, 4, device="cpu", recompute=recompute)
    assert layer_bytes(m, S, B, acc, recompute=recompute) == layer
    assert sum(i.nbytes for i in outside_items(m, S, B, acc)) == outside


def test_selective_eager_attention_stays_causal(runs):
    """The checkpointed core's name gets eager's mask function: without it transformers makes
    no mask (masking_utils: a name it has no mask function for) and eager attends to every key;
    with it the loss is the one without recompute (same weights, same tokens)."""
    net = llama("eager")
    _, _, plain = measured(net, "eager", "none")
    assert runs["eager", "selective"][2] == pytest.approx(plain, rel=1e-6)


def test_measure_scenario_runs_recompute_on_one_process(tmp_path, capsys):
    """`measure --scenario` with transformers' model recomputes on one process as the scenario
    says (no note), the bytes by hand as above, the prediction the same."""
    import json

    import yaml

    from tiersim.cli import main

    fp32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
    model = {
        "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 128, "vocab": 128,
        "max_positions": 64, "gated_mlp": True, "norm": "rmsnorm", "position": "rope",
    }  # fmt: skip
    training = {"implementation": "huggingface", "attention_kernel": "sdpa", "seq_len": S}
    training |= {"micro_batch_size": B, "precision": fp32, "recompute": "selective"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "m", "model": model, "training": training}))
    assert main(["measure", "--scenario", str(path), "--device", "cpu", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    got = json.loads(out)["activations"]
    assert "note: " not in err
    assert got["per_layer_bytes"] == [LAYER_SELECTIVE, LAYER_SELECTIVE]
    assert got["outside_layers_bytes"] == OUTSIDE + 256
    assert got["predicted_per_layer_bytes"] == LAYER_SELECTIVE
    assert got["predicted_outside_layers_bytes"] == OUTSIDE + 256
