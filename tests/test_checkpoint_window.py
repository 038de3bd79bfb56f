"""The checkpoint's "written in": from its snapshot taken to its last byte durable, the same
whether every step checkpoints or one in a few (the window once ran from the previous
checkpoint's end when every step checkpointed: the whole period)."""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate

STEP = 3.0 + (12e9 + 8e9) / 1e15  # forward 1 s + backward 2 s + the update at 1 PB/s


def momentum(nvme: str = "5 GB/s", every: int = 1):
    # 1e9 fp32 weights (4 GB) and fp32 momentum (4 GB), homed in HBM: an async checkpoint
    # snapshots both to DRAM over PCIe (10 GB/s), then drains them to NVMe over its link.
    return scenario(
        tiny(
            training={"optimizer": "sgd_momentum"},
            hardware={"links": {"nvme": {"bandwidth": nvme}}},
            checkpoint={"every_steps": every, "mode": "async"},
        )
    )


@pytest.mark.parametrize("every", [1, 2, 10])
def test_written_in_is_snapshot_plus_drain(every):
    # snapshot 8 GB / 10 GB/s = 0.8 s (both classes share PCIe fairly and end together),
    # drain 8 GB / 5 GB/s = 1.6 s: written in 2.4 s, well inside the 3.00002 s step, so the
    # next checkpoint's snapshot never waits for it and training never stalls (every step
    # checkpointing measured 3.00002 s before: the step, from the previous drain's end).
    ck = simulate(momentum(every=every)).checkpoint
    assert math.isclose(ck.write_s, 0.8 + 1.6, rel_tol=1e-9)
    assert ck.stall_s == pytest.approx(0.0, abs=1e-9)


def test_a_drain_longer_than_the_interval_is_the_stall_beyond_it():
    # NVMe link at 1 GB/s: snapshot 0.8 s + drain 8e9 / 1e9 = 8 s = 8.8 s written, at any
    # interval. Every step: the next snapshot waits for this one durable, the period is
    # 8.8 s, a stall of 8.8 - STEP. Every 2 steps: the drain outlasts the 2 steps by
    # 8.8 - 2 STEP, which the next snapshot would wait.
    one, two = (simulate(momentum("1 GB/s", n)).checkpoint for n in (1, 2))
    assert math.isclose(one.write_s, 8.8, rel_tol=1e-6)
    assert math.isclose(two.write_s, 8.8, rel_tol=1e-6)
    assert math.isclose(one.stall_s, 8.8 - STEP, rel_tol=1e-6)
    assert math.isclose(two.stall_s, 8.8 - 2 * STEP, rel_tol=1e-6)


@pytest.mark.parametrize("nvme", ["2 GB/s", "5 GB/s", "50 GB/s"])
def test_every_step_and_every_other_step_write_alike(nvme):
    # Invariant: nothing else uses the NVMe link, and a drain shorter than the step does not
    # hold the next snapshot, so one checkpoint takes as long whichever step it follows.
    one, two = (simulate(momentum(nvme, n)).checkpoint for n in (1, 2))
    assert math.isclose(one.write_s, two.write_s, rel_tol=1e-9)
