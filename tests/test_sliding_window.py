"""Sliding-window attention: a sliding layer's scores and values count min(s, w) keys per query
(full attention counts s, as Megatron's formula does), in FLOPs and in the kernel time model;
saved activations do not change. Expected figures by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import SCENARIOS, scenario

from tiersim.config.load import load_scenario
from tiersim.engine.simulate import simulate
from tiersim.state.model import Transformer, UnitKind, build_model
from tiersim.state.resolved import resolve
from tiersim.workload.kernels import layer_kernels
from tiersim.workload.work import build_workload

S, W = 8192, 4096


def _mistral(seq: int = S, **model) -> object:
    """Mistral 7B's shape (h 4096, 32 heads of 128, 32 layers), a window on every layer."""
    return scenario(
        {"name": "w", "model": {"preset": "mistral-7b", **model}, "training": {"seq_len": seq}}
    )


def _gemma(seq: int = S, **model) -> object:
    """Gemma 2 9B: 16 heads of 256, a 4096-token window on the even layers of 42."""
    return scenario(
        {"name": "g", "model": {"preset": "gemma-2-9b", **model}, "training": {"seq_len": seq}}
    )


def test_a_window_of_half_the_sequence_halves_the_attention_term():
    full = build_model(_mistral().model)
    win = build_model(_mistral(sliding_window=W).model)
    # full: 4·b·s·s·heads·head_dim = 4 x 1 x 8192 x 8192 x 32 x 128 = 1.0995e12 (QK^T and AV)
    attention = 4.0 * 1 * S * S * 32 * 128
    assert attention == 1_099_511_627_776
    linear = full.layer_forward_flops(S, 1) - attention
    assert linear == 2.0 * S * full._linear_weights_per_token(0)
    # window: 4 x 1 x 8192 x min(8192, 4096) x 32 x 128 = attention / 2
    assert win.layer_forward_flops(S, 1) == linear + attention / 2
    assert [u.kind for u in win.units()].count(UnitKind.LAYER) == 1  # every layer alike


def test_a_window_no_shorter_than_the_sequence_changes_nothing():
    full, win = _mistral(W), _mistral(W, sliding_window=W)
    m_full, m_win = build_model(full.model), build_model(win.model)
    assert m_win.layer_forward_flops(W, 1) == m_full.layer_forward_flops(W, 1)
    assert layer_kernels(resolve(win), m_win) == layer_kernels(resolve(full), m_full)
    assert simulate(win).time_s == simulate(full).time_s


def test_alternating_layers_give_the_per_layer_mix():
    s = _gemma()
    m = build_model(s.model)
    assert isinstance(m, Transformer) and m.is_sliding(0) and not m.is_sliding(1)
    # layer 1 (global): 4 x 8192 x 8192 x 16 x 256; layer 0 (local): 4 x 8192 x 4096 x 16 x 256
    global_, local = 4.0 * S * S * 16 * 256, 4.0 * S * W * 16 * 256
    assert m.layer_forward_flops(S, 1, 1) - m.layer_forward_flops(S, 1, 0) == global_ - local
    layers = [u for u in m.units() if u.kind is UnitKind.LAYER]
    assert len(layers) == 42 and all(u.count == 1 for u in layers)  # 21 local, 21 global
    units = build_workload(resolve(s)).units[:-1]
    fwd = [u.forward_s for u in units]
    assert fwd[0] < fwd[1] and fwd[0::2] == [fwd[0]] * 21 and fwd[1::2] == [fwd[1]] * 21
    k0, k1 = layer_kernels(resolve(s), m, 0), layer_kernels(resolve(s), m, 1)
    assert units[0].forward_s == pytest.approx(k0.forward.total_s)
    assert units[1].forward_s == pytest.approx(k1.forward.total_s)
    # the attention scores' memory-bound bytes halve too: 8 B per score, b·heads·s·keys
    # (Megatron's fused 13 B less the attention dropout's 5: Gemma 2's attention_dropout is
    # 0, and ATen's dropout returns its input at p = 0, no kernel)
    per_score = 13.0 - 5.0
    scores = per_score * 16 * S * (S - W)
    hbm = s.hardware.tiers[s.hardware.gpu.memory]
    bw = min(hbm.read_bw, hbm.write_bw) * s.hardware.gpu.memory_efficiency
    ffn_and_hidden = k1.forward.memory_s - per_score * 16 * S * S / bw
    assert k0.forward.memory_s == pytest.approx(ffn_and_hidden + per_score * 16 * S * W / bw)
    assert k1.forward.memory_s - k0.forward.memory_s == pytest.approx(scores / bw)


def test_the_breakdown_adds_up_layer_by_layer():
    s = _gemma()
    wl = build_workload(resolve(s))
    compute = sum(u.forward_s + u.backward_s + u.recompute_s for u in wl.units)
    b = wl.breakdown
    m = s.training.grad_accumulation
    scale = 1.0 + s.parallel.pipeline_engine_overhead
    assert b.gemm_s + b.memory_bound_s == pytest.approx(m * compute / scale, rel=1e-12)


def test_activations_do_not_change():
    full, win = build_model(_mistral().model), build_model(_mistral(sliding_window=W).model)
    assert win.layer_activation_bytes(S, 1) == full.layer_activation_bytes(S, 1)


def test_a_deep_model_with_a_window_everywhere_stays_one_run():
    m = build_model(_mistral(sliding_window=W).model)
    deep = dataclasses.replace(m, layers=10**8)
    assert [u.count for u in deep.units() if u.kind is UnitKind.LAYER] == [10**8]
    some = dataclasses.replace(deep, layers=8, sliding_window_layers=(0, 1, 2, 3))
    assert [u.count for u in some.units() if u.kind is UnitKind.LAYER] == [4, 4]


@pytest.mark.parametrize("make", [_mistral, _gemma])
def test_more_window_never_makes_a_step_faster(make):
    times = [simulate(make(sliding_window=w)).time_s for w in (512, 1024, 2048, 4096, 8192)]
    assert times == sorted(times) and times[0] < times[-1]
    assert times[-1] == simulate(make(sliding_window=16384)).time_s  # s <= w: full attention


def _shipped() -> list[Path]:
    paths = (*SCENARIOS.glob("*.yaml"), *(SCENARIOS / "published").glob("*.yaml"))
    return sorted(p for p in paths if p.name != "references.yaml")


def test_no_shipped_scenario_slides_so_the_golden_reports_stand():
    for path in _shipped():
        s = load_scenario(path).scenario
        window = getattr(s.model, "sliding_window", None)
        assert window is None or s.seq_len <= window, path.name
