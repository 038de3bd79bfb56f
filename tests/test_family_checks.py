"""`model.family` under `implementation: huggingface` names transformers' class, which fixes the
norm, the positions and the MLP (config/family_checks.py): a scenario whose keys contradict it
is refused, exit 2, at the key; under `megatron` the family stays a label."""

from __future__ import annotations

import pytest
import yaml
from conftest import scenario
from problem_lines import said

from tiersim.core.errors import InputError

# a small Llama as LlamaForCausalLM builds it: RMSNorm, rotary positions, SwiGLU
LLAMA = {
    "family": "llama", "hidden": 64, "layers": 2, "heads": 4, "ffn_hidden": 128,
    "vocab": 256, "gated_mlp": True, "norm": "rmsnorm", "position": "rope",
}  # fmt: skip


def _mapping(implementation: str, **model) -> dict:
    training = {"seq_len": 32, "implementation": implementation}
    return {"name": "f", "model": {**LLAMA, **model}, "training": training}


def test_a_llama_family_with_layernorm_or_learned_positions_is_refused_under_huggingface():
    with pytest.raises(InputError, match=r"model.norm: is layernorm, but model.family llama"):
        scenario(_mapping("huggingface", norm="layernorm"))
    with pytest.raises(InputError, match=r"model.position: is learned, .* LlamaForCausalLM"):
        scenario(_mapping("huggingface", position="learned", max_positions=64))
    with pytest.raises(InputError, match=r"model.gated_mlp: is false, .* gated_mlp: true"):
        scenario(_mapping("huggingface", gated_mlp=False))
    # GPT-2's class: LayerNorm, a learned table, a GeLU MLP
    gpt2 = {"family": "gpt2", "gated_mlp": False, "max_positions": 64}
    with pytest.raises(InputError, match=r"model.norm: is rmsnorm, .* GPT2LMHeadModel"):
        scenario(_mapping("huggingface", **gpt2))


def test_the_family_is_a_label_under_megatron_and_a_match_passes():
    scenario(_mapping("megatron", norm="layernorm", position="learned", max_positions=64))
    scenario(_mapping("huggingface"))  # the keys LlamaForCausalLM has
    scenario(_mapping("huggingface", family="gpt"))  # Megatron's GPT: no transformers class


def test_the_cli_names_the_file_and_each_key(cli, tmp_path):
    path = tmp_path / "llama.yaml"
    mapping = _mapping("huggingface", norm="layernorm", position="learned", max_positions=64)
    path.write_text(yaml.safe_dump(mapping))
    code, out, err = cli("validate", path)
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = [said(line, path) for line in err.strip().splitlines() if "model.family" in line]
    assert {line.coded for line in lines} == {
        ("E-CONFLICT", "model.norm"),
        ("E-CONFLICT", "model.position"),
    }
