"""The upper bound's pieces by hand (tiersim.plan.upper): a move alone takes what the engine
gives it, and a unit sharded over data parallelism moves only its shard between tiers."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import scenario, tiny

from tiersim.config.load import load_scenario
from tiersim.hardware.topology import Topology
from tiersim.plan.bound import step_bound, wear_floor
from tiersim.plan.upper import (
    MARGIN,
    Moves,
    gradient_moves,
    period_upper_s,
    tier_bytes,
    weight_moves,
)
from tiersim.runner import simulate
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


def test_a_zero_3_plan_on_hbf_that_wears_is_ruled_out_without_simulation():
    """The default scenario with ZeRO-3, weights and gradients on NVMe, optimizer state on HBF
    (simulated: a 9.9 s period, 2026-12-06) cannot step as slowly as its 5-year HBF budget
    needs (about 88.5 s: the sharded optimizer state written each step over the budget's
    allowance a day). The upper bound that counted whole weights and gradients on each move
    and doubled the sum was 859 s; the bound now rules the plan out."""
    sets = [
        "placement.optimizer=hbf",
        "placement.master=dram",
        "placement.weights=nvme",
        "placement.gradients=nvme",
        "parallel.zero_stage=3",
        "training.recompute=full",
    ]
    s = load_scenario(ROOT / "scenarios" / "default.yaml", sets).scenario
    res = resolve(s)
    wl = build_workload(res, build_inventory(res))
    floor, tier = wear_floor(s, step_bound(res, wl).written)
    assert tier == "hbf" and 80 < floor < 100
    assert MARGIN * period_upper_s(res, wl, Topology(res.machine)) < floor


def test_a_unit_s_weights_move_as_often_as_the_schedule_moves_them_by_hand():
    # tiny(): one layer of 1e9 fp32 parameters (4e9 B of weights), SGD with no master copy,
    # 3 micro-batches, its weights homed on NVMe, updated on the GPU (HBM), no data
    # parallelism (fetched whole). A step fetches them for each micro-batch's forward and
    # backward (2 x 3 = 6), reads them once more for the update (no master copy: it updates
    # the weights themselves) over the same route, 7 in all, and writes the updated ones
    # home once; nothing is gathered (no ZeRO), so no rest goes home. The bound counted
    # 2 x (2 x 3 + 2) = 16 fetches before.
    raw = tiny()
    raw["placement"]["weights"] = "nvme"
    raw["training"]["grad_accumulation"] = 3
    res = resolve(scenario(raw))
    wl = build_workload(res, build_inventory(res))
    moves = Moves(Topology(res.machine), 64 * 2**20)
    weight_moves(moves, res, "nvme", "hbm", wl.units[0], 1, wl.micro_batches)
    assert moves.by_move == {("nvme", "hbm", 4e9): 7, ("hbm", "nvme", 4e9): 1}


def test_a_unit_s_gradients_move_as_often_as_the_generic_engine_moves_them_by_hand():
    # tiny(): one layer of 1e9 fp32 parameters (4e9 B of gradients), 3 micro-batches, its
    # gradients homed on NVMe, updated on the CPU (in DRAM), no framework (the generic
    # engine), no data parallelism. A step writes them home after each backward (3), reads
    # them back to accumulate from the second micro-batch on (2) and once for the update,
    # NVMe to DRAM (1). The bound counted 2 x (3 + 1) = 8 each way between HBM and NVMe.
    raw = tiny()
    raw["placement"].update(gradients="nvme", optimizer_compute="cpu")
    raw["training"]["grad_accumulation"] = 3
    s = scenario(raw)
    res = resolve(s)
    wl = build_workload(res, build_inventory(res))
    moves = Moves(Topology(res.machine), 64 * 2**20)
    gradient_moves(moves, res, "nvme", "dram", wl.units[0], 1, wl.micro_batches)
    assert moves.by_move == {
        ("hbm", "nvme", 4e9): 3,
        ("nvme", "hbm", 4e9): 2,
        ("nvme", "dram", 4e9): 1,
    }
    # the engine moves as many: 3 x 4e9 B written into NVMe, 3 x 4e9 B read out of it
    nvme = simulate(s).tiers["nvme"]
    assert nvme.written_by_class["gradients"] == pytest.approx(12e9, rel=1e-6)
    assert nvme.read_by_class["gradients"] == pytest.approx(12e9, rel=1e-6)
    # under DeepSpeed (fp32 boundary gradients, swapped with the optimizer state, kernels on
    # the compute stream; ZeRO-2, as its CPU optimizer runs) each way is still counted
    # 2 x (3 + 1) = 8 times
    raw["training"]["framework"] = "deepspeed"
    raw["parallel"] = {**raw.get("parallel", {}), "zero_stage": 2}
    res = resolve(scenario(raw))
    moves = Moves(Topology(res.machine), 64 * 2**20)
    gradient_moves(moves, res, "nvme", "dram", wl.units[0], 1, wl.micro_batches)
    assert moves.by_move == {("hbm", "nvme", 4e9): 8, ("nvme", "hbm", 4e9): 8}
