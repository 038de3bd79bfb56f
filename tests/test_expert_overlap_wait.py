"""An overlapped all-to-all's tail is waited for at the end of the computation beside it, a
wait that moves no bytes and queues behind no transfer (issue 39: tiersim/workload/experts.py
`overlapped`, tiersim/engine/graph.py `_link_order`): before, the blocking sliver of the
expert all-to-all queued on NVLink behind the gradient reduce-scatter issued before it."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario, tiny
from invariant_checks import MODEL

from tiersim.engine.core import run_engine
from tiersim.engine.ops import Op, OpKind, Role, Schedule
from tiersim.engine.simulate import simulate
from tiersim.hardware.resources import NetChannel, Network
from tiersim.hardware.topology import Topology
from tiersim.state.resolved import resolve

NVLINK = Network(NetChannel.NVLINK)
ORDERED = {"simulation": {"link_sharing": "ordered"}}


def _collective(what: str, deps: list[int], nbytes: int, latency: float, kind: OpKind) -> Op:
    return Op(
        kind, Role.COLLECTIVE, what, 0, deps, 0.0, nbytes, resource=NVLINK, latency=latency,
        subject="data" if what.startswith("dp") else "expert",
    )  # fmt: skip


def test_the_wait_for_an_all_to_alls_tail_queues_behind_no_transfer():
    # `ordered`, NVLink at 1e9 B/s. A backward of 1 s; the data-parallel reduce-scatter of
    # 4e9 B issued before it (nothing waits for it); after the backward, the wait for the
    # all-to-all's tail, 0.5 s and no bytes, then its flow of 1e9 B; the next backward of
    # 1 s after the wait. By hand: the wait 1 -> 1.5 s (in the channel's queue it was
    # 5 -> 5.5 s, behind the reduce-scatter's 4 s), the next backward 1.5 -> 2.5 s; the
    # reduce-scatter 1 -> 5 s and the all-to-all's bytes after it in the queue, 5 -> 6 s.
    res = resolve(scenario(tiny(**ORDERED)))
    ops = [
        Op(OpKind.GPU, Role.BACKWARD, "backward L1", 0, (), duration=1.0),
        _collective("dp reduce-scatter", [0], 4_000_000_000, 0.0, OpKind.COMM),
        _collective("ep backward (outlasting)", [0], 0, 0.5, OpKind.SYNC),
        _collective("ep backward (overlapped)", [0], 1_000_000_000, 0.0, OpKind.COMM),
        Op(OpKind.GPU, Role.BACKWARD, "backward L0", 0, (2,), duration=1.0),
    ]
    schedule = Schedule(ops, 1, 0, {NVLINK: 1e9})
    topo = Topology(res.machine)
    _, log, _ = run_engine(res, topo, schedule, {t: 0 for t in res.machine.tiers})
    assert log.start == pytest.approx([0.0, 1.0, 1.0, 5.0, 1.5], rel=1e-12)
    assert log.end == pytest.approx([1.0, 5.0, 1.5, 6.0, 2.5], rel=1e-12)


# docs/invariants.md: the minimal scenario of seed 41 case 58 (`explore_invariants.py`)
MINIMAL = {
    "name": "a2a-sliver",
    "model": {
        **MODEL,  # the explorations' tiny dense model (tests/invariant_checks.py)
        "experts": 4,
        "experts_per_token": 2,
    },
    "training": {
        "seq_len": 256,
        "micro_batch_size": 2,
        "grad_accumulation": 2,
        "optimizer": "adam",
        "recompute": "none",
        "implementation": "megatron",
        "optimizer_step": "synchronous",
    },
    "parallel": {
        "data": 8,
        "expert": 2,
        "expert_imbalance": 1.5,
        "overlap_expert_comm": True,
        "zero_stage": 2,
    },
    "placement": {"activations": "hbf"},
    "hardware": {"preset": "h200-hbf"},
    **ORDERED,
}


def test_a_faster_hbm_never_slows_an_overlapped_expert_parallel_step():
    # (a) of docs/invariants.md, strictly under `ordered`: HBM 4.8 -> 19.2 TB/s was +1.26 %
    def step(hbm: str) -> float:
        return simulate(
            scenario(merge(MINIMAL, {"hardware": {"tiers": {"hbm": {"bandwidth": hbm}}}}))
        ).time_s

    assert step("19.2 TB/s") <= step("4.8 TB/s") * (1 + 1e-9)


def test_the_wait_runs_from_its_computations_end_not_after_the_tensor_collective():
    # The wait is the all-to-all's excess over the computation beside it, so it must start
    # at that computation's end: after the tensor-parallel collective (which queues on
    # NVLink) it grew as a faster HBM shortened the computation while the collective's
    # queue held its start, +1.05 % (1,572.07 -> 1,588.55 us) in this draw of
    # explore_invariants' space (tensor 2, context 2 over a ring, expert 2 of data 2)
    raw = {
        **MINIMAL,
        "model": {**MINIMAL["model"], "tied_embeddings": True},
        "training": {
            "seq_len": 512,
            "micro_batch_size": 1,
            "grad_accumulation": 2,
            "optimizer": "adam",
            "recompute": "selective",
            "implementation": "huggingface",
            "optimizer_step": "synchronous",
        },
        "parallel": {
            "data": 2,
            "tensor": 2,
            "context": 2,
            "context_comm": "ring",
            "zero_stage": 2,
            "expert": 2,
            "expert_imbalance": 1.5,
            "overlap_expert_comm": True,
        },
        "placement": {},
    }

    def step(hbm: str) -> float:
        over = {"hardware": {"tiers": {"hbm": {"bandwidth": hbm}}}}
        return simulate(scenario(merge(raw, over))).time_s

    assert step("19.2 TB/s") <= step("4.8 TB/s") * (1 + 1e-9)
