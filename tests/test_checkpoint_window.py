"""The checkpoint's write time: from the state it saves fixed (its step's update over) to its
last byte durable, the same whether every step checkpoints or one in a few where a drain ends
within the step (the window once ran from the previous checkpoint's end when every step
checkpointed: the whole period); where the drain outlasts the step, every step's checkpoint
waits for the previous one's before its snapshot, and is durable that much later after its
state is fixed (issue 36: what goodput's drain lag needs)."""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate

UPDATE = (12e9 + 8e9) / 1e15  # SGD with momentum: 12 GB read, 8 GB written at 1 PB/s
STEP = 3.0 + UPDATE  # forward 1 s + backward 2 s + the update


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
    # NVMe link at 1 GB/s: snapshot 0.8 s + drain 8e9 / 1e9 = 8 s = 8.8 s from the first
    # snapshot to the last byte, at any interval. Every 2 steps: one checkpoint, its
    # snapshots begun as the update ends (one layer: its state fixed then), written in 8.8 s;
    # the drain outlasts the 2 steps by 8.8 - 2 STEP, which the next snapshot would wait.
    # Every step: the next snapshot waits for this one durable, the period is 8.8 s, a
    # stall of 8.8 - STEP (its write: the next test).
    one, two = (simulate(momentum("1 GB/s", n)).checkpoint for n in (1, 2))
    assert math.isclose(two.write_s, 8.8, rel_tol=1e-6)
    assert math.isclose(one.stall_s, 8.8 - STEP, rel_tol=1e-6)
    assert math.isclose(two.stall_s, 8.8 - 2 * STEP, rel_tol=1e-6)


@pytest.mark.parametrize("nvme, drain_s", [("1 GB/s", 8.0), ("2 GB/s", 4.0)])
def test_every_step_a_drain_longer_than_the_step_is_durable_two_periods_on(nvme, drain_s):
    # Every step, the drain (8 GB at the NVMe link's rate) longer than the step: in steady
    # state checkpoint k's snapshot waits for checkpoint k-1 durable (D[k-1]) and takes
    # 0.8 s, its drain drain_s: D[k] = D[k-1] + P, P = 0.8 + drain_s. Step k's update waits
    # for snapshot k-1 (done at D[k-2] + 0.8, later than its backward, which began at the
    # update before, E[k-1], and took 3 s), so its state is fixed at E[k] = D[k-2] + 0.8 +
    # UPDATE, and it is durable D[k] - E[k] = 2 P - 0.8 - UPDATE after it: what a failure
    # then falls back over. The stall is the period's growth, P - STEP.
    period = 0.8 + drain_s
    one = simulate(momentum(nvme, 1)).checkpoint
    assert math.isclose(one.stall_s, period - STEP, rel_tol=1e-6)
    assert math.isclose(one.write_s, 2 * period - 0.8 - UPDATE, rel_tol=1e-6)


@pytest.mark.parametrize("nvme", ["5 GB/s", "50 GB/s"])
def test_every_step_and_every_other_step_write_alike(nvme):
    # Invariant: nothing else uses the NVMe link, and a drain shorter than the step does not
    # hold the next snapshot, so one checkpoint takes as long whichever step it follows.
    one, two = (simulate(momentum(nvme, n)).checkpoint for n in (1, 2))
    assert math.isclose(one.write_s, two.write_s, rel_tol=1e-9)
