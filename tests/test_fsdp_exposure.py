"""FSDP2 / ZeRO-3 exposure from first principles (tiersim/workload/fsdp_exposure.py, the
engine's scheduling of gathers and reduce-scatters): what the overlapped collectives cost the
computation they hide under, and what no computation hides, with the arithmetic written out.

The model (engine_helpers.tiny): 1e9-parameter layers of fp32 weights and gradients (4 GB of
each a layer), forward 1 s and backward 2 s on a 1 TFLOP/s GPU, HBM at 1000 TB/s (read =
write, memory efficiency 1), data 8 inside one node: NVLink 450 GB/s, 2 us a hop, NCCL at
the link's full rate. A ring all-gather or reduce-scatter of a layer over the 8 sends 7/8 of
4 GB in 7 hops: 3.5e9 / 450e9 + 7 x 2e-6 = 7.79178 ms alone."""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

GATHER_S = 3.5e9 / 450e9 + 7 * 2e-6  # one layer's all-gather (or reduce-scatter) alone
COPY_S = 2 * 4e9 / 1e15  # FSDP2's copy-out (or chunk_cat copy-in) of 4 GB: read + write
SHARE = 0.2  # gpu.collective_sm_share these tests set


def fsdp(framework: str | None = "fsdp", layers: int = 1, **over):
    training = {"framework": framework} if framework else {}
    raw = tiny(
        model={"parameters": layers * 1_000_000_000, "layers": layers},
        parallel={"data": 8, "zero_stage": 3, **over.pop("parallel", {})},
        training=training,
        hardware={"gpu": {"collective_sm_share": SHARE}, **over.pop("hardware", {})},
        **over,
    )
    return scenario(raw)


def layer(s):
    return build_workload(resolve(s)).units[0]


def test_the_hand_figures():
    assert pytest.approx(7.79178e-3, rel=1e-5) == GATHER_S
    assert pytest.approx(8e-6) == COPY_S


def test_fsdp2_pays_sm_contention_and_its_copies_on_the_compute_stream():
    u = layer(fsdp())
    # forward: the all-gather beside it takes 0.2 of the SMs for its 7.79 ms; the gathered
    # buffer is copied out into the parameters on the compute stream (2 x 4 GB at HBM rate)
    assert u.forward_s == pytest.approx(1.0 + SHARE * GATHER_S + COPY_S, rel=1e-12)
    # backward: gathered again (resharded after forward), and the reduce-scatter after it:
    # its SM share and chunk_cat's copy of the 4 GB gradient into its input
    want = 2.0 + 2 * (SHARE * GATHER_S + COPY_S)
    assert u.backward_s == pytest.approx(want, rel=1e-12)


def test_no_reshard_after_forward_gathers_before_the_forward_only():
    # reshard_after_forward false (FSDP2's fully_shard: "keeps the unsharded parameters in
    # memory after forward and avoids the all-gather in backward"): the forward pays the
    # all-gather's SM share and the copy-out as before; the backward only the
    # reduce-scatter's SM share and chunk_cat's copy-in
    u = layer(fsdp(parallel={"reshard_after_forward": False}))
    assert u.dp_weights.nbytes == pytest.approx(3.5e9)  # still sharded: gathered per forward
    assert u.forward_s == pytest.approx(1.0 + SHARE * GATHER_S + COPY_S, rel=1e-12)
    assert u.backward_s == pytest.approx(2.0 + SHARE * GATHER_S + COPY_S, rel=1e-12)


def test_zero3_without_fsdp2_pays_the_sm_share_only():
    # tiersim's generic engine (no framework): no FSDP2 copy-out or chunk_cat
    u = layer(fsdp(framework=None))
    assert u.forward_s == pytest.approx(1.0 + SHARE * GATHER_S, rel=1e-12)
    assert u.backward_s == pytest.approx(2.0 + 2 * SHARE * GATHER_S, rel=1e-12)


def test_replicated_weights_pay_nothing_here():
    # ZeRO-2 under the generic engine: gradients reduce-scattered, weights whole (the
    # reduce-scatter's SM share is left to the data-parallel model, as for every ZeRO-1/2 run)
    u = layer(fsdp(framework=None, parallel={"zero_stage": 2}))
    assert u.dp_weights is None
    assert (u.forward_s, u.backward_s) == (1.0, 2.0)


def test_the_first_gather_and_the_last_reduce_scatter_are_exposed():
    # Two layers, one gather ahead, each collective in issue order at the link's full rate.
    # The step: gather L0 (nothing to compute before layer 0: exposed), forward L0 while L1
    # gathers, forward L1; L1 was resharded after its forward and the rest unit has no work
    # to hide its gather for backward under (exposed); backward L1 while L0 gathers, backward
    # L0 while L1's gradients reduce-scatter; then L0's reduce-scatter, which the optimizer
    # waits for (exposed): 3 collectives alone.
    s = fsdp(layers=2, simulation={"link_sharing": "issue_order", "prefetch_depth": 1})
    r = simulate(s)
    assert r.exposed_collective_s == pytest.approx(3 * GATHER_S, rel=1e-6)
    compute = 2 * (1.0 + 2.0) + 2 * 3 * (SHARE * GATHER_S + COPY_S)  # 2 layers' with overheads
    assert r.compute_s == pytest.approx(compute, rel=1e-9)
    assert r.time_s == pytest.approx(compute + 3 * GATHER_S + r.optimizer_s, rel=1e-6)


@pytest.mark.parametrize("sharing", ["issue_order", "ordered"])
def test_more_bandwidth_never_slows_and_unlimited_bandwidth_exposes_nothing(sharing):
    def run(bandwidth: str, latency: str = "2 us"):
        net = {"network": {"intra_node_bandwidth": bandwidth, "intra_node_latency": latency}}
        sim = {"link_sharing": sharing}
        return simulate(fsdp(layers=2, hardware=net, simulation=sim))

    slow, fast = run("450 GB/s"), run("900 GB/s")
    assert fast.time_s <= slow.time_s
    assert fast.exposed_collective_s <= slow.exposed_collective_s
    # all but the 5 collectives' 3.5 GB each at 1e18 B/s (17.5 ns) exposes nothing
    unlimited = run("1000000 TB/s", "0 us")
    assert unlimited.exposed_collective_s == pytest.approx(0.0, abs=5 * 3.5e9 / 1e18 * 1.01)


def test_fsdp2_gathers_one_unit_ahead_unless_told():
    # FSDP2's implicit forward and default backward prefetch: one all-gather ahead; the
    # generic engine's default 2; a given depth wins
    assert simulate(fsdp(layers=2)).prefetch_depth == 1
    assert simulate(fsdp(framework=None, layers=2)).prefetch_depth == 2
    assert simulate(fsdp(layers=2, simulation={"prefetch_depth": 3})).prefetch_depth == 3
