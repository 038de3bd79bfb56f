"""A checkpoint's write is timed from the state it saves fixed (its step's update over) to its
last byte durable, not from its first snapshot (docs/invariants.md, issue 36): an async
snapshot of a unit updated early begins before the state is fixed, and timed from there a
faster tier that only began a snapshot sooner made the drain lag goodput charges longer."""

from __future__ import annotations

import math

from engine_helpers import scenario, tiny
from invariant_checks import MODEL, faster_scenario, interval_slower, merge

from tiersim import api
from tiersim.analysis.checkpoint import CheckpointCost, interval_to_steps
from tiersim.runner import simulate


def two_layers():
    # 1e9 fp32 parameters in 2 layers of 5e8, SGD with momentum, all in HBM at 100 GB/s: each
    # layer's update reads weights, gradients and momentum (3 x 2 GB) and writes weights and
    # momentum (2 x 2 GB), 10 GB / 100 GB/s = 0.1 s. An async checkpoint every 10 steps,
    # staged in DRAM over PCIe (10 GB/s), drained to NVMe over its link (5 GB/s).
    return tiny(
        model={"layers": 2},
        training={"optimizer": "sgd_momentum"},
        hardware={"tiers": {"hbm": {"bandwidth": "100 GB/s"}}},
        checkpoint={"every_steps": 10, "mode": "async", "restart": "60 s"},
    )


def test_the_write_runs_from_the_updates_end_to_the_last_byte_durable():
    # The step (warm-up 1: the checkpoint follows step 1, which begins at 6.2 s):
    #   forward 2 x 1 s, backward 2 x 2 s, then the updates: L0 6.0 -> 6.1 s, L1 6.1 -> 6.2 s
    #   into the step; T = 6.2 s, and the state the checkpoint saves is fixed at its end, E
    #   (the weights' version is the optimizer step's end; L1's momentum is written then too).
    # The copies (2 GB each: weights and momentum of each layer):
    #   E - 0.1: L0's momentum is final (its update done): its snapshot starts, alone on PCIe:
    #            1 GB by E;
    #   E:       the other three snapshots start; four share PCIe, 2.5 GB/s each: L0's
    #            momentum's last 1 GB lands at E + 0.4, when it starts draining to NVMe;
    #   E + 0.4: the three have 1 GB each left at 10/3 GB/s: they land at E + 0.7 and drain;
    #   the NVMe link is busy from E + 0.4 to the last byte (the first drain still runs when
    #   the others join it), 8 GB / 5 GB/s = 1.6 s: durable at D = E + 2.0.
    # write_s = D - E = 2.0 s; from the first snapshot (E - 0.1) it would be 2.1 s.
    ck = simulate(scenario(two_layers())).checkpoint
    assert math.isclose(ck.write_s, 2.0, rel_tol=1e-9)
    # the copies' span, from the first snapshot, is what the next checkpoint's first
    # snapshot would wait on (an `auto` interval no shorter): 2.1 s, not reported
    assert math.isclose(ck.span_s, 2.1, rel_tol=1e-9)
    assert ck.stall_s == 0.0  # the next step's updates wait for snapshots done long before
    # goodput's drain lag is write - stall = 2.0 s: with no failure rate, the work redone
    # after a failure is half the interval, 10 x 6.2 / 2 = 31 s, plus the lag; read back:
    # each class's 4 GB over NVMe's 5 GB/s link, 2 x 0.8 s; recovery 60 + 1.6 + 33 s
    report = api.run(api.build(two_layers())).report
    assert math.isclose(report["checkpoint"]["recovery_s"], 60 + 1.6 + 31 + 2.0, rel_tol=1e-9)


def test_a_drain_longer_than_the_interval_stalls_its_excess_from_the_first_snapshot():
    # The step above, checkpointing every 2 steps (12.4 s), its drain over an NVMe link of
    # 0.5 GB/s: the snapshots as above (the last lands at E + 0.7), the link busy from E + 0.4
    # to the last byte, 8 GB / 0.5 GB/s = 16 s: durable at D = E + 16.4 (write_s 16.4 s), the
    # first snapshot begun at E - 0.1 (span_s 16.5 s). The next checkpoint's first snapshot
    # would begin an interval after this one's first, at E - 0.1 + 12.4 = E + 12.3, and waits
    # for D (one checkpoint in flight): the stall is D - (E + 12.3) = span - interval = 4.1 s
    # (the snapshots themselves hold nothing: done by E + 0.7, the next updates at E + 6.0).
    # Timed from the state fixed (write_s) it would be 16.4 - 12.4 = 4.0 s: 0.1 s short.
    raw = merge(
        two_layers(),
        {
            "checkpoint": {"every_steps": 2},
            "hardware": {"links": {"nvme": {"bandwidth": "0.5 GB/s"}}},
        },
    )
    ck = simulate(scenario(raw)).checkpoint
    assert math.isclose(ck.write_s, 16.4, rel_tol=1e-9)
    assert math.isclose(ck.span_s, 16.5, rel_tol=1e-9)
    assert math.isclose(ck.stall_s, 16.5 - 2 * 6.2, rel_tol=1e-9)


def test_an_interval_is_no_shorter_than_the_copies_span_from_the_first_snapshot():
    # durable 2.0 s after its state is fixed, its copies begun 0.1 s before that (the span
    # 2.1 s), no stall, 1 s steps: goodput's lag is 2.0 s, but the next checkpoint's first
    # snapshot, an interval after this one's, waits unless the interval is 2.1 s or more, so
    # Daly's 0.5 s is raised to 3 steps (2 would leave it waiting), not to 2; of 3 and 4, 3:
    # with no stall goodput falls as the interval grows
    cost = CheckpointCost(1e9, 2.0, 0.0, 1.0, 60.0, span_s=2.1)
    assert (cost.drain_lag_s, cost.drain_s) == (2.0, 2.1)
    assert interval_to_steps(0.5, 1.0, cost, 3600.0) == 3


# benchmarks/explore_invariants.py --seed 11, case 206 (the 207th draw): `pipeline: 2`, FSDP
# ZeRO-3, weights homed on HBF, master on NVMe, an async checkpoint every 10 steps staged on
# HBF, drained to DRAM, a job MTBF of 3 h (docs/invariants.md)
CASE_206 = {
    "name": "explore",
    "model": {
        **MODEL,  # the explorations' tiny dense model (tests/invariant_checks.py)
        "experts": 4,
        "experts_per_token": 2,
        "shared_experts": 0,
        "tied_embeddings": True,
    },
    "training": {
        "seq_len": 512,
        "micro_batch_size": 2,
        "grad_accumulation": 4,
        "optimizer": "muon",
        "recompute": "none",
        "implementation": "huggingface",
        "framework": "fsdp",
        "optimizer_step": "synchronous",
    },
    "parallel": {
        "data": 2,
        "tensor": 1,
        "pipeline": 2,
        "context": 2,
        "zero_stage": 3,
        "context_comm": "all_to_all",
        "expert": 1,
        "expert_imbalance": 1.5,
        "overlap_expert_comm": False,
    },
    "placement": {"weights": "hbf", "master": "nvme"},
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 10, "target": "dram", "mode": "async", "staging": "hbf"},
    "failures": {"mtbf": "3 h"},
    "simulation": {"link_sharing": "ordered"},
}


def test_a_faster_tier_that_starts_a_snapshot_sooner_is_no_slower_per_useful_step():
    # Invariant (a): the HBF tier 4 x faster gives the same step and interval and the same
    # last byte durable, its first snapshot begun 25.6 us sooner. Timed from that snapshot
    # the write was 2.421 -> 2.447 ms and the wall time per useful step +2.4e-9 relative;
    # from the state fixed, the checkpoint is durable no later.
    slow = api.run(api.build(merge(CASE_206, {}))).report
    fast = api.run(api.build(faster_scenario(CASE_206, "hbf tier"))).report
    assert fast["step"]["time_s"] <= slow["step"]["time_s"] * (1 + 1e-9)
    assert fast["checkpoint"]["write_s"] <= slow["checkpoint"]["write_s"] * (1 + 1e-9)
    assert interval_slower(slow, fast) == []
