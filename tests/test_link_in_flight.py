"""A link's time with a transfer in flight (its latency included) beside its busy time (bytes
moving), on tiny timelines worked by hand: the report's `in_flight_s`, the links table's
"in flight" columns and the step picture's rows say the same figure."""

from __future__ import annotations

import math

from engine_helpers import scenario, tiny

from tiersim.report.plot_timeline import busy_share, timeline_rows
from tiersim.report.text import step_tables
from tiersim.runner import Run, simulate

OPT_S = 12e9 / 1e15  # GPU SGD: 3 x 4 GB at 1 PB/s (as tests/test_engine_timeline.py)


def _with_pcie_latency(raw, latency="100 ms"):
    raw["hardware"]["links"]["pcie"]["latency"] = latency
    return raw


def test_each_moves_latency_is_in_flight_but_not_busy():
    # weights (4 GB) in DRAM behind 10 GB/s with 100 ms latency: four moves a step (fetch
    # for forward, refetch for backward, fetch for the update, write back), one at a time,
    # each 0.1 s of latency then 0.4 s of bytes
    r = simulate(scenario(_with_pcie_latency(tiny(placement={"weights": "dram"}))))
    step_s = 3.0 + 4 * (0.1 + 0.4) + OPT_S
    assert math.isclose(r.time_s, step_s)
    pcie = r.links["pcie"]
    assert math.isclose(pcie.busy_s, 4 * 0.4)
    assert math.isclose(pcie.in_flight_s, 4 * 0.5)
    assert math.isclose(pcie.utilization, 1.6 / step_s)
    assert math.isclose(pcie.in_flight_utilization, 2.0 / step_s)


def test_transfers_in_flight_together_count_once_as_the_picture_rows_do():
    # SGD momentum (4 GB) homed on NVMe behind DRAM (NVMe link 5 GB/s), gradients (4 GB)
    # homed in DRAM, the update on the GPU; PCIe 10 GB/s with 100 ms latency. After backward
    # (3.0 s) the gradient goes out: 0.1 + 0.4 s, 3.0-3.5 (hbm->dram). Then the update's two
    # reads cross PCIe's dram->hbm together, on two routes: the gradient (0.1 s latency, then
    # 10 GB/s until the momentum joins, 5 GB/s each after) lands at 4.387 s; the momentum
    # (0.1 s latency, its first 64 MiB chunk through DRAM, FILL, then 4 GB at the NVMe
    # link's 5 GB/s) at 3.5 + 0.9 + FILL: the row is in flight 0.9 + FILL s, counted once
    # (not the gradient's 0.887 s more). The momentum goes back the same way: 0.9 + FILL s.
    fill = 64 * 2**20 / 5e9
    raw = _with_pcie_latency(
        tiny(
            training={"optimizer": "sgd_momentum"},
            placement={"optimizer": "nvme", "gradients": "dram"},
        )
    )
    r = simulate(scenario(raw), record=True)
    opt_s = 20e9 / 1e15  # weights, gradient, momentum read; weights, momentum written
    step_s = 3.0 + 0.5 + 2 * (0.9 + fill) + opt_s
    assert math.isclose(r.time_s, step_s)
    pcie = r.links["pcie"]
    # bytes moving: the gradient out 0.4 s; both reads from 3.6 s to their end; the write-back
    assert math.isclose(pcie.busy_s, 0.4 + (0.8 + fill) + 0.8)
    assert math.isclose(pcie.in_flight_s, 0.5 + 2 * (0.9 + fill))  # not + 0.887 more
    # the picture: a row per direction, each saying its share in flight
    rows = dict(timeline_rows(r.trace))
    up, down = rows["link pcie: hbm->dram"], rows["link pcie: dram->hbm"]
    assert math.isclose(busy_share(up, step_s), (0.5 + 0.9 + fill) / step_s, rel_tol=1e-6)
    assert math.isclose(busy_share(down, step_s), (0.9 + fill) / step_s, rel_tol=1e-6)


def test_a_collectives_latency_is_in_flight_but_not_busy():
    # two data-parallel GPUs all-reduce 4 GB of fp32 gradients in a ring on 10 GB/s with a
    # 50 ms latency: 2(n-1)/n x 4 GB / 10 GB/s = 0.4 s of bytes, 2(n-1) x 50 ms = 0.1 s of
    # latency, after backward with nothing left to hide it
    raw = tiny(parallel={"data": 2})
    raw["hardware"]["network"] = {"intra_node_bandwidth": "10 GB/s", "intra_node_latency": "50 ms"}
    r = simulate(scenario(raw))
    assert math.isclose(r.time_s, 3.0 + 0.5 + OPT_S)
    nvlink = r.links["nvlink"]
    assert math.isclose(nvlink.busy_s, 0.4)
    assert math.isclose(nvlink.in_flight_s, 0.5)


def test_a_checkpoints_in_flight_time_is_shared_over_its_interval():
    # a blocking checkpoint of the 4 GB of weights to DRAM every 2 steps: 0.1 s of latency
    # and 0.4 s of bytes, training stalled for all 0.5 s; per step half of each, over the step
    # with its share of the stall (3 s + OPT_S + 0.5 s / 2), as utilization is
    raw = tiny(checkpoint={"every_steps": 2, "target": "dram", "mode": "blocking"})
    r = simulate(scenario(_with_pcie_latency(raw)))
    pcie, period = r.links["pcie"], 3.0 + OPT_S + 0.5 / 2
    assert math.isclose(pcie.busy_s, 0.4 / 2)
    assert math.isclose(pcie.in_flight_s, 0.5 / 2)
    assert math.isclose(pcie.utilization, 0.2 / period)
    assert math.isclose(pcie.in_flight_utilization, 0.25 / period)


def test_the_links_table_gives_busy_and_in_flight_side_by_side():
    s = scenario(_with_pcie_latency(tiny(placement={"weights": "dram"})))
    report = Run(s).report
    assert report["links"]["pcie"]["in_flight_s"] == 2.0
    table = step_tables(report)
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("link "))
    assert "  busy  utilization  in flight  in flight %  bandwidth used" in header
    (pcie,) = [line for line in lines if line.startswith("pcie ")]
    # busy 1.6 s of the 5.000012 s step is 32.0 %; in flight 2 s of it 40.0 %
    assert pcie.split()[5:11] == ["1.600", "s", "32.0", "%", "2.000", "s"]
    assert pcie.split()[11:13] == ["40.0", "%"]
    assert "in flight: a transfer begun and not landed, its latency included" in table
