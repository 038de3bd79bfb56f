"""The upper bound's pieces by hand (tiersim.plan.upper): a move alone takes what the engine
gives it, and a unit sharded over data parallelism moves only its shard between tiers."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import scenario, tiny

from tiersim.config.load import load_scenario
from tiersim.hardware.topology import Topology
from tiersim.plan.upper import Moves, tier_bytes
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parents[1]


def test_a_move_alone_is_its_latency_fill_and_bytes_at_the_bottleneck_by_hand():
    res = resolve(scenario(tiny()))
    moves = Moves(Topology(res.machine), 64 * 2**20)
    moves.add("nvme", "hbm", 1e9, times=3)
    moves.add("hbm", "hbm", 5e9)  # a move within a tier is not one: nothing counted
    # tiny(): nvme -> dram over the 5 GB/s nvme link, dram -> hbm over the 10 GB/s pcie; every
    # port 1000 TB/s and no latency. Bottleneck 5 GB/s, two links: the fill is one 64 MiB
    # chunk (67,108,864 B) over it, then the 1e9 bytes: (67,108,864 + 1e9) / 5e9 s a move
    expected = 3 * (67_108_864 + 1e9) / 5e9  # = 0.640265318... s
    assert moves.seconds() == pytest.approx(expected, rel=1e-12)


def test_a_route_less_pair_makes_the_bound_infinite():
    island = {"kind": "dram", "capacity": "1 TB", "bandwidth": "1 TB/s"}  # no link reaches it
    res = resolve(scenario(tiny(hardware={"tiers": {"island": island}})))
    moves = Moves(Topology(res.machine), 64 * 2**20)
    moves.add("nvme", "island", 1.0)
    assert moves.seconds() == float("inf")


def test_a_zero_3_unit_moves_its_shard_and_an_unsharded_one_all_of_it():
    def weights_and_gradients(zero: int) -> tuple[float, float]:
        s = load_scenario(
            ROOT / "scenarios" / "default.yaml",
            [f"parallel.zero_stage={zero}", "placement.weights=dram", "placement.gradients=dram"],
        ).scenario
        res = resolve(s)
        wl = build_workload(res, build_inventory(res))
        pairs = [tier_bytes(u) for u in wl.units]
        return sum(w for w, _ in pairs), sum(g for _, g in pairs)

    params = 6_738_415_616  # Llama 2 7B (scenarios/default.yaml's header), bf16: 2 B each
    # ZeRO-3 on 8 data-parallel GPUs: each keeps 1/8 of the weights and of the gradients
    assert weights_and_gradients(3) == (params * 2 / 8, params * 2 / 8)
    # no ZeRO: every GPU holds and moves them whole
    assert weights_and_gradients(0) == (params * 2, params * 2)
