"""Tensor parallelism beyond the KV heads by framework (issue 39, config/kv_head_split.py):
only Megatron-Core runs it (an all-gather of the QKV output, tests/test_qkv_gather.py);
torchtitan, Megatron-DeepSpeed, DeepSpeed's AutoTP and transformers' own plan refuse it or fail
on it, and tiersim refuses it there."""

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
