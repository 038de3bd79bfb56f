"""A point's fixed cost cut without moving a figure (docs/speed.md, twelfth round): what each
cut now takes from its caller, held to arithmetic written out here."""

from __future__ import annotations

import math

import pytest
from conftest import scenario

from tiersim.state.resolved import resolve
from tiersim.workload import breakdown, comms, work
from tiersim.workload.work import build_workload


def _megatron(**parallel):
    raw = {
        "name": "m",
        "model": {"preset": "megatron-22b"},
        "training": {"micro_batch_size": 4, "seq_len": 2048, "recompute": "none"},
        "parallel": {"tensor": 8, **parallel},
        "hardware": {"preset": "dgx-a100"},
    }
    return scenario(raw)


def _all_reduce_s() -> float:
    # one tensor-parallel all-reduce of s·b·h = 2048·4·6144 x 2 B = 100.66 MB inside a node:
    # a ring sends 2·7/8 of it at NVLink's 300 GB/s x NCCL's busbw fraction, between the
    # 64 MiB (0.594) and 128 MiB (0.622) points at log2(100.66e6 / 2^26) of the way
    buffer = 2048 * 4 * 6144 * 2
    share = 0.594 + math.log2(buffer / 2**26) * (0.622 - 0.594)
    return 2 * 7 / 8 * buffer / (300e9 * share)


def test_hidden_collectives_cost_their_sm_share_at_nvlinks_rate():
    # the capacities are worked out once a workload and handed to each unit's hidden
    # collectives: a layer's two backward all-reduces and the (last stage's) head's one,
    # each costing dgx-a100's collective_sm_share 0.15 of its time alone on NVLink
    blocking = build_workload(resolve(_megatron())).units
    hidden = build_workload(resolve(_megatron(overlap_tensor_backward=True))).units
    layer = hidden[0].backward_s - blocking[0].backward_s
    rest = hidden[-1].backward_s - blocking[-1].backward_s
    assert layer == pytest.approx(0.15 * 2 * _all_reduce_s(), rel=1e-9)
    assert rest == pytest.approx(0.15 * _all_reduce_s(), rel=1e-9)


def test_the_breakdowns_collectives_at_nvlinks_rate():
    # pipeline 1, 8 micro-batches: each of the 48 layers' forward two all-reduces and
    # backward two, blocking, and the rest unit's embedding (forward) and head (backward)
    # all-reduce: (48 x 4 + 2) all-reduces a micro-batch, nothing else communicates
    s = _megatron()
    s = s.model_copy(update={"training": s.training.model_copy(update={"grad_accumulation": 8})})
    wl = build_workload(resolve(s))
    assert wl.breakdown.collectives_s == pytest.approx(8 * (48 * 4 + 2) * _all_reduce_s())


def test_a_workload_works_the_capacities_out_once(monkeypatch):
    calls, capacities = [], comms.capacities

    def counted(r):
        calls.append(r)
        return capacities(r)

    for module in (work, breakdown, comms):
        monkeypatch.setattr(module, "capacities", counted)
    build_workload(resolve(_megatron(overlap_tensor_backward=True)))
    assert len(calls) == 1
