"""The routed experts' state homed apart from the dense state (placement.experts): the
inventory's tiers, the engine's movement and the flash wear it implies, each figure worked
out by hand here from Mixtral 8x7B's tensors (32 layers, 8 experts of gate, up and down
4096 x 14336: 45,097,156,608 routed parameters; 1,605,636,096 others)."""

from __future__ import annotations

import json

import pytest
from conftest import SCENARIOS, inventory
from engine_helpers import assert_bytes_conserved, merge, scenario
from test_moe import small

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

ROUTED = 45_097_156_608 // 8  # per GPU: 1 of the 8 experts of every layer (parallel.expert 8)
OTHER = 1_605_636_096
GB = 10**9

APART = {
    "name": "apart",
    "model": {"preset": "mixtral-8x7b"},
    "training": {"optimizer": "adamw", "seq_len": 4096, "recompute": "full"},
    "parallel": {"data": 16, "expert": 8, "zero_stage": 1},
    "placement": {"experts": {"master": "dram", "optimizer": "dram"}},
    "hardware": {"preset": "dgx-h100"},
}


def test_each_tier_holds_the_dense_or_the_experts_part_of_a_class():
    inv = inventory(APART)
    # ZeRO-1: the experts' fp32 master and two fp32 moments over the 2 ranks holding the same
    # experts (data 16 / expert 8), the dense ones over all 16
    assert inv.tiers["dram"].classes == {"master": 4 * ROUTED // 2, "optimizer": 8 * ROUTED // 2}
    assert inv.tiers["dram"].resident_bytes == 33_822_867_456
    hbm = inv.tiers["hbm"].classes
    assert hbm["master"] == 4 * OTHER // 16 == 401_409_024
    assert hbm["optimizer"] == 8 * OTHER // 16 == 802_818_048
    assert hbm["weights"] == hbm["gradients"] == 2 * (ROUTED + OTHER)
    # nothing lost between the tiers: they hold every class's per-GPU bytes
    held = sum(t.resident_bytes for t in inv.tiers.values())
    assert held == inv.per_gpu.total


def test_an_moe_layer_becomes_its_rest_and_its_experts_with_the_flops_split():
    s = scenario(small(placement={"experts": {"optimizer": "dram"}}))
    whole = build_workload(resolve(scenario(small()))).units
    parts = build_workload(resolve(s)).units
    names = [u.name for u in parts[:-1]]
    assert names == ["L0", "L1", "L1.experts", "L2", "L2.experts", "L3", "L3.experts"]
    rest, experts = parts[1], parts[2]
    assert rest.home is None and experts.home["optimizer"] == "dram"
    assert experts.home["master"] == "hbm"  # unset classes stay with the dense state
    # routed experts' FLOPs: 2 of 8 experts, gate/up/down 64 x 32, over T = 32 tokens; the
    # layer's as test_moe works them out (attention, router, experts, scores)
    routed = 2 * 32 * 2 * 3 * 64 * 32
    layer = 2 * 32 * (4 * 64 * 64 + 64 * 8 + 2 * 3 * 64 * 32) + 4 * 2 * 16 * 16 * 4 * 16
    assert experts.forward_s == pytest.approx(whole[1].forward_s * routed / layer, rel=1e-12)
    assert rest.forward_s + experts.forward_s == pytest.approx(whole[1].forward_s, rel=1e-12)
    assert experts.params == 8 * 3 * 64 * 32 and experts.activations == 0
    assert rest.params + experts.params == whole[1].params
    assert experts.tp_forward is None and experts.ep_forward is None  # expert 1: no all-to-all


def test_the_engine_moves_only_the_experts_state_over_pcie():
    r = simulate(scenario(APART))
    moved = 2 * (4 + 8) * ROUTED // 2  # master and moments read to the GPU and written back
    assert r.links["pcie"].bytes == moved == 67_645_734_912
    written = {"master": 4 * ROUTED // 2, "optimizer": 8 * ROUTED // 2}
    assert r.tiers["dram"].written_by_class == written


def test_experts_optimizer_state_on_nvme_wears_it_by_its_own_bytes(cli, write, tmp_path):
    on_nvme = merge(APART, {"placement": {"experts": {"optimizer": "nvme"}}})
    code, out, err = cli("run", write(on_nvme), "--format", "json", "--out", tmp_path / "o")
    assert code == 0, err
    wear = json.loads(out)["wear"]["nvme"]
    assert wear["host_bytes_written_per_step"] == 8 * ROUTED // 2 == 22_548_578_304


def test_the_shipped_scenario_by_hand(cli, tmp_path):
    path = SCENARIOS / "mixtral-8x7b-experts-offload-dgx-h100.yaml"
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path / "out")
    assert code == 0, err
    report = json.loads(out)
    tiers = report["tiers"]
    assert tiers["dram"]["resident_bytes"] == 12 * ROUTED // 2 == 33_822_867_456
    # HBM: bf16 weights and gradients whole, the dense master and moments 16 ways, full
    # recompute's layer inputs 32 x 2·s·b·h = 32 x 2 x 4096 x 4096 B, the workspace: PyTorch's
    # two cuBLAS workspaces on an H100, 2 x 4096 x 8 x 1024 B (docs/kernel-workspace.md)
    layer_inputs = 32 * 2 * 4096 * 4096
    hbm = 2 * 2 * (ROUTED + OTHER) + 12 * OTHER // 16 + layer_inputs + 2 * 4096 * 8 * 1024
    assert tiers["hbm"]["resident_bytes"] == hbm == 31_316_200_448
    assert report["links"]["pcie"]["bytes"] == 2 * 12 * ROUTED // 2


def test_expert_homes_are_checked(cli, write):
    experts_apart = {"experts": {"optimizer": "dram"}}
    dense = {"name": "d", "model": {"preset": "mistral-7b"}, "placement": experts_apart}
    code, _, err = cli("validate", write(dense))
    assert code == 2 and "placement.experts.optimizer: is set, but" in err
    nowhere = merge(APART, {"placement": {"experts": {"master": "tape"}}})
    code, _, err = cli("validate", write(nowhere, "n.yaml"))
    assert code == 2 and "placement.experts.master: tier 'tape' does not exist" in err


def _small_apart(**over):
    return small(
        parallel={"data": 8, "expert": 4, "zero_stage": 1},
        placement={"experts": {"master": "dram", "optimizer": "nvme"}},
        simulation={"link_sharing": "ordered"},
        **over,
    )


def test_bytes_are_conserved_with_the_experts_apart():
    r = simulate(scenario(_small_apart()))
    assert r.tiers["nvme"].written_by_class  # the experts' moments went there
    assert_bytes_conserved(r)


@pytest.mark.parametrize(
    "faster",
    [
        {"hardware": {"links": {"pcie": {"bandwidth": "500 GB/s"}}}},
        {"hardware": {"tiers": {"nvme": {"write_bandwidth": "50 GB/s"}}}},
    ],
)
def test_more_bandwidth_never_slows_a_step_with_the_experts_apart(faster):
    base = simulate(scenario(_small_apart())).time_s
    assert simulate(scenario(merge(_small_apart(), faster))).time_s <= base * (1 + 1e-9)


def test_megatron_keeps_the_experts_state_on_the_gpu_too(cli, write):
    off = merge(APART, {"training": {"framework": "megatron"}})
    code, _, err = cli("validate", write(off))
    assert code == 2 and "placement.experts.master: 'dram': training.framework: megatron" in err
