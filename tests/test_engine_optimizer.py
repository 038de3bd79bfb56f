"""The optimizer step's movement and memory, computed by hand on tiny setups.

tiny(): 1e9 parameters, fp32, forward 1 s and backward 2 s per 1e9-parameter layer at
1 TFLOP/s, PCIe 10 GB/s, NVMe link 5 GB/s, tier ports at 1 PB/s.
"""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate

GB = 1_000_000_000


def test_staged_optimizer_state_is_held_until_written_back():
    # 4 layers, SGD momentum (1 GB per layer, fp32) homed in DRAM, prefetch depth 1: at most
    # two units' state are staged in HBM at once (a unit's fetch waits for the write-back of
    # the unit two before it). HBM holds weights 4 GB + gradients 4 GB + 2 x 1 GB staged.
    raw = tiny(
        model={"parameters": GB, "layers": 4},
        training={"optimizer": "sgd_momentum"},
        placement={"optimizer": "dram"},
        simulation={"prefetch_depth": 1},
    )
    r = simulate(scenario(raw))
    assert r.tiers["hbm"].resident_bytes == 8 * GB
    assert r.tiers["hbm"].peak_bytes == 10 * GB


def test_offloaded_gradients_come_back_only_depth_units_ahead():
    # 8 layers, gradients (0.5 GB per layer) homed in DRAM, depth 1: the optimizer pulls
    # two units' gradients at a time, so HBM peaks at weights 4 GB + 2 x 0.5 GB.
    raw = tiny(
        model={"parameters": GB, "layers": 8},
        placement={"gradients": "dram"},
        simulation={"prefetch_depth": 1},
    )
    assert simulate(scenario(raw)).tiers["hbm"].peak_bytes == 5 * GB


def test_cpu_optimizer_is_not_hidden_by_the_pipeline_bubble():
    # p = 4 stages of one layer, m = 4: (m + p - 1) x (1 + 2) s = 21 s of pipeline, with a
    # 9 s bubble (stage 0 waiting for the later stages' backwards) before stage 0's last
    # backward, which ends the pipeline. Then the final gradients (1 GB fp32) and the weights
    # to update in place (1 GB, no master copy) go to DRAM over PCIe: 2 GB / 10 GB/s = 0.2 s;
    # the CPU update of 0.25e9 parameters at 0.1 Gparam/s = 2.5 s; the new weights back:
    # 0.1 s.
    raw = tiny(
        model={"parameters": GB, "layers": 4},
        parallel={"pipeline": 4},
        training={"grad_accumulation": 4},
        placement={"optimizer_compute": "cpu"},
        hardware={"cpu": {"optimizer_rate": "0.1 Gparam/s"}},
    )
    r = simulate(scenario(raw))
    assert math.isclose(r.time_s, 21.0 + 0.2 + 2.5 + 0.1)
    assert math.isclose(r.exposed_cpu_s, 2.5)
    assert math.isclose(r.pipeline_bubble_s, 9.0)


def test_zero1_gathered_weights_reach_their_home():
    # bf16 weights (2 GB) in DRAM, Adam with fp32 master, d = 4, ZeRO-1: this GPU updates
    # its 0.5 GB shard, writes it home, the all-gather brings the other 1.5 GB into HBM and
    # they are written home too: 2 GB over PCIe towards DRAM per step. Fetches for forward
    # and backward bring 2 x 2 GB back.
    raw = tiny(
        parallel={"data": 4, "zero_stage": 1},
        placement={"weights": "dram"},
        training={
            "optimizer": "adam",
            "precision": {
                "weights": "bf16",
                "gradients": "bf16",
                "master": "fp32",
                "optimizer": "fp32",
            },
        },
    )
    r = simulate(scenario(raw))
    assert r.links["pcie"].bytes_by_direction == {"hbm->dram": 2 * GB, "dram->hbm": 4 * GB}
    assert r.tiers["dram"].written_by_class == {"weights": 2 * GB}


def two_layer_cpu_optimizer(mode: str) -> dict:
    """Two 0.5e9-parameter fp32 layers (forward 0.5 s, backward 1 s each), SGD on the CPU at
    1 Gparam/s (0.5 s a layer); no master copy, so the update reads the weights themselves."""
    return tiny(
        model={"parameters": 1_000_000_000, "layers": 2, "forward_flops_per_token_per_layer": 5e8},
        placement={"optimizer_compute": "cpu"},
        training={"optimizer_step": mode},
    )


def test_synchronous_update_waits_for_every_gradient_and_the_next_step_for_all_of_it():
    # Backward ends at 3 s (forwards 0.5 + 0.5, backwards 1 + 1). Only then do both layers'
    # gradients and weights (2 GB each) cross PCIe at 10 GB/s, in issue order: layer 0's
    # 3.0-3.2 and 3.2-3.4, layer 1's 3.4-3.6 and 3.6-3.8. CPU: layer 0 3.4-3.9, layer 1
    # 3.9-4.4; new weights back 2 GB at 10 GB/s (the other direction): layer 0 3.9-4.1,
    # layer 1 4.4-4.6. The next step starts when the whole update is done: 4.6 s.
    r = simulate(scenario(two_layer_cpu_optimizer("synchronous")))
    assert math.isclose(r.time_s, 4.6)
    assert math.isclose(r.exposed_cpu_s, 1.0)  # 3.4-4.4
    assert math.isclose(r.exposed_transfer_s, 0.6)  # 3.0-3.4 and 4.4-4.6


def test_pipelined_update_overlaps_the_next_forward():
    # Layer 1's gradient is final at 2 s (its backward ends first): its 4 GB cross alone,
    # 2.0-2.4. Layer 0's at 3 s: 3.0-3.4. CPU: layer 0 3.4-3.9, then layer 1 3.9-4.4. New
    # weights: layer 0 3.9-4.1, layer 1 4.4-4.6. The next step's first forward needs layer 0
    # only: it starts at 4.1, so the period is 4.1 s and layer 1's update hides under it.
    r = simulate(scenario(two_layer_cpu_optimizer("pipelined")))
    assert math.isclose(r.time_s, 4.1)
    assert math.isclose(r.exposed_cpu_s, 0.7)  # 3.4-4.1 of the GPU's idle 3.0-4.1
    assert math.isclose(r.exposed_transfer_s, 0.4)  # 3.0-3.4


@pytest.mark.parametrize("sharing", ["fair", "issue_order", "ordered"])
def test_update_reads_overlap_the_write_backs_under_every_link_sharing(sharing):
    # 4 layers of 0.25e9 parameters, SGD momentum (1 GB fp32 per layer) homed in DRAM, updated
    # on the GPU (HBM at 1000 TB/s: microseconds), prefetch depth 1 (a unit's fetch waits for
    # the write-back of the unit two before it, which frees its staging room). PCIe carries
    # 10 GB/s in each direction at once: a read or a write of one layer takes 0.1 s.
    # Forwards 4 x 1 s and backwards 4 x 2 s end at 12 s. Reads in issue order, writes as
    # each update ends:
    #   read 0 12.0-12.1, read 1 12.1-12.2, write 0 12.1-12.2,
    #   read 2 (after write 0) 12.2-12.3, write 1 12.2-12.3,
    #   read 3 (after write 1) 12.3-12.4, write 2 12.3-12.4, write 3 12.4-12.5:
    # 4 reads + 1 write, 12.5 s, under every sharing policy. (Fair sharing used to read units
    # 0 and 1 together, 12.0-12.2, write both together, 12.2-12.4, then the same for units 2
    # and 3: read + write in series, 12.8 s.)
    raw = tiny(
        model={"parameters": GB, "layers": 4},
        training={"optimizer": "sgd_momentum"},
        placement={"optimizer": "dram"},
        simulation={"prefetch_depth": 1, "link_sharing": sharing},
    )
    r = simulate(scenario(raw))
    assert math.isclose(r.time_s, 12.5, abs_tol=1e-4)
    assert r.links["pcie"].bytes_by_direction == {"hbm->dram": 4 * GB, "dram->hbm": 4 * GB}
