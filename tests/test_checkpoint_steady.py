"""Every step checkpointing, the step reported is one that repeats (tiersim.engine.durable):
a drain longer than a step holds the next checkpoint, and the figures must not depend on how
many warm-up steps were simulated."""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import pytest
from engine_helpers import scenario, tiny

from tiersim.config.load import Loaded, load_scenario
from tiersim.engine import durable
from tiersim.engine import simulate as simulate_module
from tiersim.engine.runs import Runs
from tiersim.report.text import step_tables
from tiersim.runner import report_for, simulate

# Llama 2 7B (scenarios/default.yaml): 6,738,415,616 parameters replicated over 8 data-parallel
# GPUs; each writes its 1/8 share: bf16 weights (2 B) + fp32 master (4 B) + fp32 Adam moments
# (8 B) = 14 B a parameter.
CHECKPOINT_BYTES = 6_738_415_616 // 8 * (2 + 4 + 8)  # 11,792,227,328 B
SLOW_NVME = 1e9  # B/s, the reviewer's hardware.tiers.nvme.write_bandwidth
PCIE = 50e9  # B/s, the h200-hbf preset's HBM/HBF -> DRAM link every snapshot crosses


def reviewer_case(warmup: int, *extra: str):
    return load_scenario(
        "scenarios/default.yaml",
        [
            "checkpoint.every_steps=1",
            "training.grad_accumulation=1",
            "hardware.tiers.nvme.write_bandwidth=1 GB/s",
            f"simulation.warmup_steps={warmup}",
            *extra,
        ],
    ).scenario


class RunLengths(Runs):
    """Runs that note each run's length and whether it checkpoints."""

    calls: ClassVar[list[tuple[int, bool]]] = []

    def __call__(self, res, setup, steps, checkpoint_steps=frozenset(), recorder=None):
        RunLengths.calls.append((steps, bool(checkpoint_steps)))
        return super().__call__(res, setup, steps, checkpoint_steps, recorder)


@pytest.fixture
def run_lengths(monkeypatch):
    RunLengths.calls = []
    monkeypatch.setattr(simulate_module, "Runs", RunLengths)
    return RunLengths.calls


def test_a_drain_longer_than_a_step_reports_the_same_checkpoint_whatever_the_warm_up():
    # One checkpoint drains 11.79 GB at 1 GB/s, over five 2.08 s steps: it holds the next
    # checkpoint, so in steady state a step lasts as long as one checkpoint's write.
    results = [simulate(reviewer_case(n)) for n in (1, 2, 3, 5)]
    first = results[0].checkpoint
    for r in results[1:]:
        assert math.isclose(r.checkpoint.stall_s, first.stall_s, rel_tol=1e-9)
        assert math.isclose(r.checkpoint.write_s, first.write_s, rel_tol=1e-9)
    for r in results:
        ck = r.checkpoint
        assert ck.steady and ck.bytes == CHECKPOINT_BYTES
        # the drains keep the NVMe link busy for the bytes over its bandwidth, 11.792 s ...
        drain_s = CHECKPOINT_BYTES / SLOW_NVME
        assert math.isclose(ck.link_busy_s["nvme"], drain_s, rel_tol=1e-9)
        # ... and a checkpoint starts when the previous one is durable while the step ends
        # with its checkpoint's last drain: step + stall, the period, is one checkpoint's
        # copy, the drain plus the wait for the first snapshot to land in DRAM before the
        # NVMe link starts (~0.1 s, and before every snapshot has crossed PCIe, 0.236 s):
        # the hand estimate, 11.8 s, to within that.
        period = r.time_s + ck.stall_s
        assert 0 < period - drain_s < CHECKPOINT_BYTES / PCIE
        # Its write runs from its state fixed (its step's update over): its snapshot then
        # waits for the previous checkpoint durable, so it is durable more than a period
        # after its state, and less than two (the update it saves waited for the previous
        # checkpoint's snapshot, which began as the one before it was durable).
        assert period < ck.write_s < 2 * period


def test_a_drain_shorter_than_a_step_simulates_no_extra_step(run_lengths):
    # The preset's NVMe writes 6.6 GB/s: 11.79 GB / 6.6 GB/s = 1.79 s, within a 2.08 s step:
    # the warm-up step already repeats, and the runs are the plain run and the checkpoint
    # run of warm-up + 2 steps, as before.
    s = load_scenario(
        "scenarios/default.yaml", ["checkpoint.every_steps=1", "training.grad_accumulation=1"]
    ).scenario
    r = simulate(s)
    assert r.time_s > CHECKPOINT_BYTES / 6.6e9
    assert run_lengths == [(3, False), (3, True)]
    assert r.checkpoint.steady


def test_a_step_not_seen_to_repeat_is_the_last_one_and_said(run_lengths, monkeypatch):
    # tiny: 8 GB (weights + momentum) drained at 1 GB/s every 3 s step; its steady period,
    # worked out in test_checkpoint_engine, is 0.8 s of snapshots + 8 s of drain. With no
    # repetition seen (the check switched off) the runs double up to the bound: 2 units a
    # step (the layer and the rest) at 1 micro-batch, 12 passes allowed -> 6 steps; the step
    # reported is the last one followed by another, still the steady one, and said so.
    monkeypatch.setattr(durable, "_repeating", lambda schedule, log, first: None)
    raw = tiny(
        training={"optimizer": "sgd_momentum"},
        hardware={"links": {"nvme": {"bandwidth": "1 GB/s"}}},
        checkpoint={"every_steps": 1, "mode": "async"},
        simulation={"max_layer_passes": 12},
    )
    s = scenario(raw)
    r = simulate(s)
    assert run_lengths == [(3, False), (3, True), (6, True), (6, False)]
    step = 3.0 + (12e9 + 8e9) / 1e15  # compute + SGD-momentum update at 1 PB/s
    assert not r.checkpoint.steady
    assert math.isclose(r.checkpoint.stall_s, 0.8 + 8.0 - step, rel_tol=1e-6)
    # written from the state fixed: its snapshot waits for the previous drain (D[k-1]), its
    # update for the previous snapshot (D[k-2] + 0.8): 2 x 8.8 - 0.8 - the update
    # (test_checkpoint_window works it out)
    assert math.isclose(r.checkpoint.write_s, 2 * 8.8 - 0.8 - (step - 3.0), rel_tol=1e-6)
    report = report_for_scenario(s)
    assert report["checkpoint"]["steady"] is False
    assert "not seen to repeat within 64 steps" in step_tables(report)


def test_a_settled_checkpoint_section_has_no_steady_key():
    raw = tiny(
        training={"optimizer": "sgd_momentum"},
        hardware={"links": {"nvme": {"bandwidth": "1 GB/s"}}},
        checkpoint={"every_steps": 1, "mode": "async"},
    )
    report = report_for_scenario(scenario(raw))
    assert "steady" not in report["checkpoint"]
    assert "not seen to repeat" not in step_tables(report)


def report_for_scenario(s):
    return report_for(Loaded(s, {}, "test.yaml"))


def test_a_checkpoint_waits_for_the_previous_one_through_one_join():
    # default.yaml, an async checkpoint every step: each checkpoint's moves wait for the
    # previous checkpoint's drains through one join op (the drains, 33 units x 3 classes), not
    # each move for every drain (which grows as units squared); each checkpoint has its join,
    # which frees its staged copy
    from tiersim.engine.ops import OpKind, Role
    from tiersim.engine.schedule import build_schedule
    from tiersim.engine.simulate import prepare
    from tiersim.state.inventory import build_inventory
    from tiersim.state.resolved import resolve

    path = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"
    res = resolve(load_scenario(path, ["checkpoint.every_steps=1"]).scenario)
    setup = prepare(res, build_inventory(res))
    ops = build_schedule(res, setup.wl, 3, setup.depth, frozenset({0, 1, 2})).ops
    joins = [op for op in ops if op.kind is OpKind.JOIN]
    assert len(joins) == 3  # each checkpoint durable: the second and the third wait for one
    drains = [op for op in ops if op.role is Role.CHECKPOINT and op.label.startswith("drain")]
    assert all(len(j.deps) == len(drains) // 3 for j in joins)
    moves = [op for op in ops if op.role is Role.CHECKPOINT and op.kind is OpKind.MOVE]
    assert max(len(op.deps) for op in moves) <= 2  # its class's version, and the join
