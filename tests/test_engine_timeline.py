"""Whole-step timelines on tiny setups, with every event time computed by hand."""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate

OPT_S = 12e9 / 1e15  # GPU SGD touches grads + weights read + weights written: 3 x 4 GB at 1 PB/s


def test_everything_in_hbm_is_the_serial_compute():
    # forward 1e12 FLOP at 1 TFLOP/s = 1 s, backward 2 s, optimizer 12 GB / 1 PB/s.
    r = simulate(scenario(tiny()))
    assert math.isclose(r.time_s, 3.0 + OPT_S)
    assert math.isclose(r.compute_s, 3.0)
    assert r.exposed_transfer_s == pytest.approx(0.0, abs=1e-12)
    assert r.overlap is None  # nothing moved
    assert all(link.bytes == 0 for link in r.links.values())


def test_weights_streamed_from_dram_with_nothing_to_hide_behind():
    # Weights (4 GB fp32) live in DRAM behind a 10 GB/s link: 0.4 s per fetch.
    # One step: fetch 0.4 | forward 1 | refetch for backward 0.4 (the head sits between the
    # two uses, so they are not consecutive) | backward 2 | with no master copy the update
    # reads the weights themselves: fetch 0.4 | optimizer OPT_S | updated weights back to
    # DRAM 0.4. The next step's first fetch waits for that write.
    r = simulate(scenario(tiny(placement={"weights": "dram"})))
    assert math.isclose(r.time_s, 0.4 + 1 + 0.4 + 2 + 0.4 + OPT_S + 0.4)
    assert math.isclose(r.exposed_transfer_s, 1.6)
    assert r.links["pcie"].bytes == 4 * 4_000_000_000
    assert r.links["pcie"].bytes_by_direction == {"dram->hbm": 12e9, "hbm->dram": 4e9}
    assert math.isclose(r.links["pcie"].busy_s, 1.6)
    assert r.overlap == pytest.approx(0.0, abs=1e-12)
    assert r.tiers["dram"].written_by_class == {"weights": 4_000_000_000}
    assert r.tiers["hbm"].written_by_class == {"weights": 12_000_000_000}


def test_stream_bound_optimizer_state_matches_bytes_over_bandwidth():
    # SGD with momentum keeps one fp32 value per parameter: 4 GB, homed on NVMe behind
    # DRAM (NVMe link 5 GB/s, PCIe 10 GB/s). With the optimizer on the GPU the state is read
    # NVMe -> DRAM -> HBM (bottleneck 5 GB/s: 0.8 s, plus the first 64 MiB chunk crossing
    # the first hop at 5 GB/s before the second hop starts) and written back the same way.
    chunk = 64 * 2**20
    fill = chunk / 5e9
    opt = (12e9 + 2 * 4e9) / 1e15  # grads, weights in and out, momentum in and out
    training = {"optimizer": "sgd_momentum", "optimizer_step": "pipelined"}
    r = simulate(scenario(tiny(training=training, placement={"optimizer": "nvme"})))
    # Pipelined: the fetch waits for the unit's final gradient (end of backward); the
    # write-back of step k then runs under step k+1's forward and backward (3 s > 0.8 s), so
    # the period is compute 3 s + fetch + update, and the write-back is hidden.
    assert math.isclose(r.time_s, 3.0 + (0.8 + fill) + opt, rel_tol=1e-9)
    assert r.tiers["nvme"].written_by_class == {"optimizer": 4_000_000_000}
    assert r.tiers["dram"].written_by_class == {"optimizer": 8_000_000_000}  # staged both ways
    # Synchronous (the default): the next step waits for the write-back too, the same
    # 0.8 s + fill the other way.
    training["optimizer_step"] = "synchronous"
    r = simulate(scenario(tiny(training=training, placement={"optimizer": "nvme"})))
    assert math.isclose(r.time_s, 3.0 + 2 * (0.8 + fill) + opt, rel_tol=1e-9)
    assert math.isclose(r.exposed_transfer_s, 2 * (0.8 + fill), rel_tol=1e-9)  # opt: GPU busy


def test_full_recompute_costs_one_extra_forward():
    base = simulate(scenario(tiny()))
    full = simulate(scenario(tiny(training={"recompute": "full"})))
    assert math.isclose(full.recompute_s, 1.0)
    assert math.isclose(full.compute_s - base.compute_s, 1.0)
    assert math.isclose(full.time_s - base.time_s, 1.0)


def test_cpu_optimizer_moves_gradients_and_weights_over_pcie():
    # CPU optimizer: 1e9 params at 1 Gparam/s = 1 s (memory bandwidth never binds here).
    # After backward the gradients (4 GB) and, with no master copy, the weights it updates in
    # place (4 GB) go HBM -> DRAM together, sharing 10 GB/s: 0.8 s; the CPU updates (1 s);
    # the new weights come back DRAM -> HBM (0.4 s) before the next forward.
    raw = tiny(placement={"optimizer_compute": "cpu"})
    r = simulate(scenario(raw))
    assert math.isclose(r.time_s, 3.0 + 0.8 + 1.0 + 0.4)
    assert math.isclose(r.optimizer_s, 1.0)
    assert math.isclose(r.exposed_cpu_s, 1.0)
    assert math.isclose(r.exposed_transfer_s, 1.2)
