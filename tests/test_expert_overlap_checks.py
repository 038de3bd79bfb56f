"""Under `training.framework: megatron`, what Megatron-Core refuses with
--overlap-moe-expert-parallel-comm is refused (exit 2, E-CONFLICT) with Megatron-Core's reason:
its asserts in `TransformerConfig.__post_init__` (NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py @ 002526d81b81; issue 39,
tiersim/config/expert_overlap_checks.py). Builds only: no step is simulated."""

from __future__ import annotations

import pytest
from engine_helpers import merge
from test_expert_alone_passes import MINIMAL

from tiersim import api
from tiersim.core.errors import InputError

# the minimal MoE scenario (expert 4 of data 16, overlap on) as Megatron-LM runs it: selective
# recompute, no dropout
ACCEPTED = merge(
    MINIMAL,
    {
        "model": {"attention_dropout": 0, "hidden_dropout": 0},
        "training": {"framework": "megatron", "recompute": "selective"},
    },
)
REFUSED = [
    # (what Megatron-Core asserts, the change, the key path, words of its assert message)
    (
        {"parallel": {"pipeline": 2}},
        "parallel.virtual_pipeline",
        "virtual_pipeline_model_parallel_size must be specified",
    ),
    (
        {"parallel": {"expert": 1}},
        "parallel.expert",
        "only supported with expert model parallelism",
    ),
    (
        {"training": {"recompute_modules": ["core_attn", "moe"]}},
        "training.recompute_modules",
        "disable moe in recompute_modules",
    ),
    (
        {"training": {"precision": {"weights": "fp32"}}},
        "training.precision.weights",
        "only supported with bf16 or fp16",
    ),
    ({"model": {"mtp_layers": 2}}, "model.mtp_layers", "MTP layernum only supports 1"),
    (
        {"training": {"recompute": "full", "recompute_every": 2}},
        "training.recompute_every",
        "recompute_num_layers must be None",
    ),
    (
        {"training": {"recompute": "full", "fp8": {"recipe": "delayed"}}},
        "training.fp8.recipe",
        "not yet supported with delayed-scaling FP8",
    ),
    (
        {"training": {"recompute": "full"}, "model": {"hidden_dropout": 0.1}},
        "model.hidden_dropout",
        "attention_dropout==0 and hidden_dropout==0",
    ),
]


def _problems(raw: dict) -> list[tuple[str, str, str]]:
    try:
        api.build(raw)
    except InputError as e:
        return [(p.path, p.code, p.message) for p in e.problems]
    return []


def test_megatron_accepts_what_it_ships():
    assert _problems(ACCEPTED) == []
    # full recompute runs with the overlap (the whole model chunk recomputed), without dropout
    assert _problems(merge(ACCEPTED, {"training": {"recompute": "full"}})) == []
    # interleaved 1F1B with pipelining
    layout = {"parallel": {"pipeline": 2, "virtual_pipeline": 2}}
    assert _problems(merge(ACCEPTED, layout)) == []


@pytest.mark.parametrize(("change", "path", "words"), REFUSED)
def test_megatron_refuses_what_megatron_core_asserts(change, path, words):
    found = _problems(merge(ACCEPTED, change))
    assert [(where, code) for where, code, _ in found] == [(path, "E-CONFLICT")]
    what = found[0][2]
    assert words in what and "002526d81b81" in what
    assert "parallel.overlap_expert_comm: false" in what  # what to write instead


def test_other_frameworks_and_no_framework_are_not_checked_against_megatron_core():
    plain_1f1b = {"parallel": {"pipeline": 2}}
    for framework in (None, "deepspeed"):
        raw = merge(ACCEPTED, plain_1f1b)
        raw["training"] = {k: v for k, v in raw["training"].items() if k != "framework"}
        if framework:
            raw["training"]["framework"] = framework
        assert not [p for p in _problems(raw) if p[0] == "parallel.virtual_pipeline"]


def test_dropout_left_out_is_megatron_lms_default_and_refused_with_full_recompute():
    raw = merge(MINIMAL, {"training": {"framework": "megatron"}})  # recompute full, no dropout keys
    found = _problems(raw)
    assert [(where, code) for where, code, _ in found] == [
        ("model.attention_dropout", "E-CONFLICT"),
        ("model.hidden_dropout", "E-CONFLICT"),
    ]
    assert "0.1 (the implementation's default)" in found[0][2]  # --attention-dropout 0.1
