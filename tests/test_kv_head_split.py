"""Tensor parallelism beyond the KV heads by framework (issue 39, config/kv_head_split.py):
only Megatron-Core runs it (an all-gather of the QKV output, tests/test_qkv_gather.py);
torchtitan, Megatron-DeepSpeed, DeepSpeed's AutoTP and transformers' own plan refuse it or fail
on it, and tiersim refuses it there. And what Megatron-Core's core-attention checkpoint keeps
of the gathered tensor (state/qkv_gather_memory.py). Expected bytes written out by hand."""

from __future__ import annotations

import pytest

# 2 layers, h 64, 8 query heads and 2 KV heads of e = 8, gated MLP of 128, RoPE; s 16 x b 2:
# T = 32 tokens, bf16; tensor 4 = 2 x the KV heads.
MODEL = (
    "{layers: 2, hidden: 64, heads: 8, kv_heads: 2, ffn_hidden: 128, vocab: 128,"
    " gated_mlp: true, norm: rmsnorm, position: POS}"
)
T, A, K, E, DT, TP = 32, 8, 2, 8, 2, 4


def _write(tmp_path, training: str, tensor: int = TP, position: str = "rope"):
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nmodel: {MODEL.replace('POS', position)}\n"
        f"training: {{micro_batch_size: 2, seq_len: 16, grad_accumulation: 2{training}}}\n"
        f"parallel: {{tensor: {tensor}}}\nhardware: {{preset: dgx-h100}}\n"
    )
    return path


REFUSED = [
    # torchtitan/models/llama3/model.py update_from_config's ValueError, word for word
    (", framework: fsdp", "'tensor_parallel_degree (4) must divide n_kv_heads (2)'"),
    (", implementation: torchtitan", "'tensor_parallel_degree (4) must divide n_kv_heads (2)'"),
    # Megatron-DeepSpeed: divide(num_key_value_heads, world_size) asserts
    (", framework: deepspeed", "asserting '2 is not divisible by 4'"),
    # AutoTP training's torch.chunk and transformers' colwise: 2 x 8 / 4 = 4 columns a rank
    (", framework: deepspeed, implementation: huggingface", "2 x 8 / 4 = 4 columns a rank"),
    (", implementation: huggingface", "2 x 8 / 4 = 4 columns a rank"),
    (", framework: fsdp, implementation: huggingface", "shards k_proj and v_proj 'colwise'"),
]


@pytest.mark.parametrize(("training", "rule"), REFUSED)
def test_beyond_the_kv_heads_is_refused_where_the_framework_does(cli, tmp_path, training, rule):
    code, _, err = cli("validate", _write(tmp_path, training))
    assert code == 2
    assert "parallel.tensor: is 4, more than model.kv_heads (2)" in err
    assert rule in err and "[E-CONFLICT]" in err
    assert "expected a tensor size dividing the KV heads: 1, 2" in err


@pytest.mark.parametrize("training", ["", ", framework: megatron"])
def test_megatron_core_runs_it(cli, tmp_path, training):
    code, _, err = cli("validate", _write(tmp_path, training))
    assert code == 0, err


@pytest.mark.parametrize("training", [t for t, _ in REFUSED])
def test_a_tensor_size_dividing_the_kv_heads_runs_under_every_framework(cli, tmp_path, training):
    code, _, err = cli("validate", _write(tmp_path, training, tensor=2))
    assert "more than model.kv_heads" not in err
    assert code == 0, err


def _attention_inputs(cli_json, tmp_path, recompute: str, position: str = "rope") -> dict:
    report = cli_json(_write(tmp_path, f", recompute: {recompute}", position=position))
    return report["activations"]


def test_no_recompute_keeps_one_kv_head_a_rank(cli_json, tmp_path):
    """TE copies the strided V (get_qkv_layout's contiguous fallback): the gathered tensor is
    a transient. A rank's layer: the qkv projection input s·b·h (replicated) 4,096 B, q at
    a/t = 2 heads 1,024 B, K and V at one head 1,024 B, the out-projection input 1,024 B."""
    act = _attention_inputs(cli_json, tmp_path, "none")
    per_layer = DT * T * 64 + DT * T * 2 * E + 2 * DT * T * 1 * E + DT * T * 2 * E
    assert per_layer == 7_168
    assert act["per_gpu_bytes_by_group"]["attention_inputs"] == 2 * per_layer


def test_selective_recompute_keeps_the_gathered_tensor(cli_json, tmp_path):
    """Megatron-Core's core-attention checkpoint saves V, a view of the gathered
    [s, b, (a + 2k)·e]: each rank keeps all of it, beside RoPE's new q (2 heads) and k (1)."""
    act = _attention_inputs(cli_json, tmp_path, "selective")
    gathered = DT * T * (A + 2 * K) * E  # 2 x 32 x 12 x 8
    per_layer = DT * T * 64 + DT * T * 2 * E + gathered + DT * T * 2 * E + DT * T * 1 * E
    assert (gathered, per_layer) == (6_144, 12_800)
    assert act["per_gpu_bytes_by_group"]["attention_inputs"] == 2 * per_layer
    item = [i for i in act["items"] if i["name"].startswith("gathered qkv")]
    assert [i["per_gpu_bytes"] for i in item] == [2 * gathered]


def test_without_rope_q_and_k_are_views_of_the_gathered_tensor_too(cli_json, tmp_path):
    """position: none: no new q or k; the checkpoint's three inputs share one storage."""
    act = _attention_inputs(cli_json, tmp_path, "selective", position="none")
    per_layer = DT * T * 64 + DT * T * 2 * E + DT * T * (A + 2 * K) * E
    assert per_layer == 11_264
    assert act["per_gpu_bytes_by_group"]["attention_inputs"] == 2 * per_layer


def test_selective_recompute_keeps_more_than_none_here(cli_json, tmp_path):
    """Selective recompute drops the scores, 5·a·s²·b / t = 5 x 8 x 256 x 2 / 4 = 5,120 B a
    layer (eager softmax, dropout mask, dropped probabilities), and adds the gathered tensor
    in place of V: 12,800 - 7,168 = 5,632 B. Net +512 B a layer, 2 layers."""
    none = cli_json(_write(tmp_path, ", recompute: none"))["inventory"]["per_gpu"]
    sel = cli_json(_write(tmp_path, ", recompute: selective"))["inventory"]["per_gpu"]
    assert 5 * A * 16 * 16 * 2 // TP == 5_120
    assert sel["activations"] - none["activations"] == 2 * (12_800 - 7_168 - 5_120) == 1_024
