"""The vocabulary's weight gradients in the step's memory timeline (state/vocab_grads.py), by
hand, and `tiersim measure --model gpt2` as a user first types it: transformers' GPT-2 measured
on the CPU against the huggingface accounting, the step's peak within 2 %."""

from __future__ import annotations

import json

import pytest
from conftest import scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events

V, H = 4096, 64
GPT2 = {"preset": "gpt2", "layers": 2, "hidden": H, "heads": 4, "ffn_hidden": 256, "vocab": V}
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}


def events(implementation: str, tied: bool) -> list[tuple[str, str, bool, int]]:
    """The step's vocabulary-gradient events (moment, part, allocated?, bytes), GPU 0."""
    training = {"seq_len": 64, "precision": BF16, "workspace": "0 B"}
    training["implementation"] = implementation
    model = {**GPT2, "tied_embeddings": tied}
    r = resolve(scenario({"name": "v", "model": model, "training": training}))
    out = build_events(r, build_inventory(r), 0)
    return [(e.moment, e.part, e.alloc, e.nbytes) for e in out if e.part in PARTS]


ONE = V * H * 2  # a V x h gradient in bf16: 4096 x 64 x 2 = 524,288 B
HEAD, EMB = "head's weight gradient", "embedding's weight gradient (dense)"
SUM = "tied weight's summed gradient"
PARTS = (HEAD, EMB, SUM)


def test_a_tied_head_gradient_is_kept_to_the_embedding_backward_and_summed():
    """Tied (GPT-2): the head's gradient made in the loss's backward waits for the embedding's;
    their sum is a third V x h tensor (autograd's input buffer), then all three go."""
    assert events("huggingface", tied=True) == [
        ("backward: loss", HEAD, True, ONE),
        ("backward: embeddings", EMB, True, ONE),
        ("backward: embeddings", SUM, True, ONE),
        ("backward: embeddings", EMB, False, ONE),
        ("backward: embeddings", HEAD, False, ONE),
        ("backward: embeddings", SUM, False, ONE),
    ]


def test_an_untied_head_gradient_is_added_into_grad_at_once():
    assert events("huggingface", tied=False) == [
        ("backward: loss", HEAD, True, ONE),
        ("backward: loss", HEAD, False, ONE),
        ("backward: embeddings", EMB, True, ONE),
        ("backward: embeddings", EMB, False, ONE),
    ]


def test_megatron_fuses_the_head_wgrad_into_main_grad():
    assert events("megatron", tied=False) == []


def test_measure_gpt2_as_first_typed_agrees_within_2_percent(capsys):
    """No --implementation: transformers' GPT-2 (random weights, its dropout 0.1, sdpa) on the
    CPU, predicted by the huggingface accounting for the CPU. Every class equal; the step's
    peak (profiler memory events) within 2 % (it is the embedding's backward: state and three
    V x h bf16 gradients)."""
    pytest.importorskip("transformers")
    from tiersim.cli import main

    sets = [f"model.{k}={v}" for k, v in GPT2.items() if k != "preset"]
    argv = ["measure", "--model", "gpt2", "--seq-len", "64", "--device", "cpu"]
    assert main([*argv, *(a for s in sets for a in ("--set", s)), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["configuration"]["implementation"] == "huggingface"
    assert got["configuration"]["family"] == "gpt2"
    for cls, c in got["classes"].items():
        assert c["measured_bytes"] == c["predicted_bytes"], cls
    peak, predicted = got["peak_allocated_bytes"], got["predicted_peak_bytes"]
    assert abs(predicted / peak - 1) <= 0.02, (peak, predicted)
