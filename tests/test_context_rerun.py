"""Selective recompute under context parallelism reruns the forward's K/V exchange (cprerun,
issue 39): Megatron-Core's core-attention checkpoint wraps Transformer Engine's
DotProductAttention, whose context-parallel exchange runs inside the core, so the backward's
rerun of the core repeats it once (tiersim/workload/context.py cites both sources). The
arithmetic is written out here.

The shape is tests/test_context.py's: h = 512, 8 heads of 64, s = 4096, b = 1, tensor 2 with
sequence parallelism, context 4 (the 8 ranks in one DGX H100 node: NVLink), 2 layers, 2
micro-batches, Megatron's layer (its checkpoint holds the core whatever the kernel). One
rank's K/V: 4096/4 = 1024 tokens x 2 (K, V) x 8/2 heads x 64 x 2 B = 1,048,576 B = 1 MiB.
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import merge, scenario
from test_context import BASE, MIB

from tiersim.state.inventory import layer_activation_bytes
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s
from tiersim.workload.work import build_workload


def _unit(**over):
    r = resolve(scenario(merge(BASE, over)))
    return r, next(u for u in build_workload(r).units if u.name == "L0")


def _sent(*comms) -> float:
    return sum(c.nbytes for c in comms if c is not None)


# per layer and micro-batch, one rank: (forward, backward without recompute), by style
# - ring: c - 1 = 3 chunks forward; K/V and dK/dV backward, 2 x 3 = 6 chunks
# - all_gather: the gather sends (c - 1)/c of 4 x 1 MiB = 3 MiB; backward the gather again
#   and the reduce-scatter of dK/dV, 3 + 3 = 6 MiB
# - all_to_all: Q, K, V and the output, 1024 x (4 x 256) values x 2 B = 2 MiB, (c - 1)/c of
#   it = 1.5 MiB; backward the same for the gradients
EXCHANGE = {"ring": (3, 6), "all_gather": (3, 6), "all_to_all": (1.5, 1.5)}


@pytest.mark.parametrize("style", sorted(EXCHANGE))
def test_selective_backward_sends_one_forward_exchange_more(style):
    # selective reruns the core, its exchange inside: backward = its own + the forward's,
    # ring 6 + 3 = 9 MiB, all_gather 6 + 3 = 9 MiB, all_to_all 1.5 + 1.5 = 3 MiB; the
    # forward sends what it sent before
    fwd, bwd = EXCHANGE[style]
    for recompute, rerun in (("none", 0), ("selective", fwd)):
        _, u = _unit(parallel={"context_comm": style}, training={"recompute": recompute})
        assert _sent(u.cp_forward, u.cp_forward_hidden) == pytest.approx(fwd * MIB)
        assert _sent(u.cp_backward, u.cp_backward_hidden) == pytest.approx((bwd + rerun) * MIB)


def test_the_rerun_ring_hides_as_the_forward_s():
    # The rerun ring runs beside the rerun attention as the forward's does: exposed beyond
    # 3/4 of the attention's time. No SM count: GEMMs at 989 TFLOP/s x 0.781 without waves.
    # Attention forward, eager (every score): 4·s²·(a·d)/t/c = 4 x 4096² x 512 / 2 / 4 =
    # 4,294,967,296 FLOPs = 5.56 us; backward 2 x that (eager). The ring's time alone: F
    # forward (3 chunks), 2F backward (6 chunks, twice the bytes and the latencies). So the
    # forward's exposed share is e = (F - 3/4 x 5.56 us) / F, and the backward's own
    # (2F - 3/4 x 2 x 5.56 us) / 2F = e too: under selective the backward blocks on
    # 6e + 3e = 9e MiB and sends 9(1 - e) MiB beside compute.
    attention_f = 4.0 * 4096**2 * 512 / 2 / 4 / (989e12 * 0.781)
    assert attention_f == pytest.approx(5.56e-6, rel=1e-3)
    r, u = _unit(hardware={"gpu": {"sm_count": None}}, training={"recompute": "selective"})
    whole_f = alone_s(r, u.cp_forward) + alone_s(r, u.cp_forward_hidden)
    e = (whole_f - attention_f * 3 / 4) / whole_f
    assert 0 < e < 1
    assert u.cp_forward.nbytes == pytest.approx(3 * MIB * e)
    assert u.cp_backward.nbytes == pytest.approx(9 * MIB * e)
    assert u.cp_backward_hidden.nbytes == pytest.approx(9 * MIB * (1 - e))


def test_megatron_deepspeed_ulysses_reruns_nothing():
    # Megatron-DeepSpeed's DistributedAttention runs outside any checkpoint (ParallelAttention
    # at 1e3fc81d sets checkpoint_core_attention only without its sequence parallelism): under
    # selective, even with eager attention, the layer keeps what it keeps without recompute,
    # Korthikanti's s·b·h·(34 + 5·a·s/h)/(t·c) = 2,097,152 x 354 / 8 = 92,798,976 B, and its
    # backward sends only its own 1.5 MiB
    over = {"parallel": {"context_comm": "all_to_all"}}
    r, u = _unit(training={"recompute": "selective", "framework": "deepspeed"}, **over)
    assert r.accounting.core_checkpointed is False
    assert layer_activation_bytes(r, r.model) == pytest.approx(92_798_976)
    assert _sent(u.cp_backward, u.cp_backward_hidden) == pytest.approx(1.5 * MIB)
    assert u.recompute_s == 0.0


def test_the_step_s_link_bytes_rise_by_one_forward_exchange(cli, write, tmp_path):
    # A run's NVLink bytes of the context group: per layer and micro-batch 3 + 6 = 9 MiB
    # without recompute, 9 + 3 = 12 MiB under selective; x 2 layers x 2 micro-batches:
    # 36 MiB = 37,748,736 B -> 48 MiB = 50,331,648 B, a rise of 12 MiB = 12,582,912 B. The
    # ring's exposed and hidden parts are separate flows, each a fraction of the bytes
    # (counted whole per flow): its totals within a few bytes, the rise the same.
    sent = {}
    for style in ("all_gather", "ring"):
        for recompute in ("none", "selective"):
            over = {"parallel": {"context_comm": style}, "training": {"recompute": recompute}}
            path = write(merge(BASE, over), f"{style}-{recompute}.yaml")
            out = tmp_path / f"{style}-{recompute}"
            code, text, err = cli("run", path, "--format", "json", "--out", out)
            assert code == 0, err
            links = json.loads(text)["links"]["nvlink"]["bytes_by_direction"]
            sent[style, recompute] = links["context"]
    assert sent["all_gather", "none"] == 37_748_736
    assert sent["all_gather", "selective"] == 50_331_648
    assert sent["ring", "none"] == pytest.approx(37_748_736, abs=16)
    assert sent["ring", "selective"] - sent["ring", "none"] == pytest.approx(12_582_912, abs=16)
