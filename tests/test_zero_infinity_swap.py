"""ZeRO-Infinity's parameter swap-in from NVMe, a use ahead of the gather (engine/param_swap.py:
DeepSpeed's PartitionedParameterCoordinator.__prefetch_nvme_param_partitions). Every expected
figure is worked out here by hand."""

from __future__ import annotations

import math

import pytest
from engine_helpers import assert_bytes_conserved, merge, scenario, tiny

from tiersim.engine.simulate import simulate
from tiersim.runner import Run

GB = 1e9
FAST = "1000 TB/s"
CHUNK_S = 2**26 / 5e9  # one 64 MiB staging chunk (simulation.chunk_size) at 5 GB/s


def two_layers(weights: str = "nvme", nvme: str = "5 GB/s", pcie: str = FAST) -> dict:
    """Two 0.5e9-parameter layers (forward 0.5 s, backward 1 s each on the 1 TFLOP/s GPU),
    bf16 weights (1 GB a layer) homed on `weights`, fp32 master weights and the SGD update
    on the GPU; DeepSpeed with max_live_parameters 5e8, one layer: nothing gathered ahead
    (workload/fetch.py fetch_depth: 5e8 // 5e8 - 1 = 0)."""
    raw = tiny(
        model={"parameters": 1_000_000_000, "layers": 2, "forward_flops_per_token_per_layer": 5e8},
        training={
            "framework": "deepspeed",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
            "offload": {"max_live_parameters": 500_000_000},
        },
        placement={"weights": weights},
    )
    links = {"pcie": {"bandwidth": pcie}, "nvme": {"bandwidth": nvme}}
    return merge(raw, {"hardware": {"links": links}})


@pytest.fixture(scope="module")
def swapped():
    return simulate(scenario(two_layers()))


def test_the_drive_read_of_the_next_layer_runs_beside_this_one(swapped):
    # Each use's 1 GB leaves the drive at 5 GB/s (0.2 s) into a pinned buffer; PCIe is
    # unlimited, so the copy to the GPU takes no time. The gather (here the copy) of a use
    # waits for the previous use's end (depth 0), but its drive read was issued one use
    # earlier, once the previous fetch had landed:
    #   L0 fwd: read 0-0.2 (the update before it just wrote the weights), F0 0.2-0.7
    #   L1 fwd: read 0.2-0.4 beside F0, F1 0.7-1.2
    #   the rest (no parameters) 1.2; L1 is kept from its forward to its backward (DeepSpeed's
    #   coordinator: nothing with parameters between them, within stage3_max_reuse_distance,
    #   1e9 values; tests/test_deepspeed_reuse.py): B1 1.2-2.2, no read
    #   L0 bwd (released after its forward: the scan passes L1's forward and backward, 5e8
    #   values each, and stops at 1e9 before L0's backward): read issued after the use two
    #   back (the rest's backward, 1.2): 1.2-1.4 beside B1, B0 2.2-3.2
    # then the updated bf16 weights go home, 1 GB a layer over PCIe and the drive (0.2 s plus
    # the pipeline's first 64 MiB chunk each), one after the other: 3.2 + 2 x 0.2134.
    # Read serially (each fetch after the previous use), it was 3 x (0.2 + chunk) + 3.0 +
    # 2 x 0.2134 = 4.07 s: 0.43 s more.
    writes = 2 * (0.2 + CHUNK_S)
    assert swapped.prefetch_depth == 0
    assert math.isclose(swapped.time_s, 3.2 + writes, abs_tol=1e-4)
    # exposed: L0's forward read (0.2 s) and the write-backs
    assert math.isclose(swapped.exposed_transfer_s, 0.2 + writes, abs_tol=1e-4)


def test_the_swap_in_moves_the_same_bytes():
    # three fetches of 1 GB (L0, L1 forward; L0 backward: L1 kept) read from the drive and
    # crossed to the GPU; the two updated layers written back: 2 GB
    r = Run(scenario(two_layers())).report
    assert r["tiers"]["nvme"]["read_by_class"] == {"weights": 3 * GB}
    assert r["tiers"]["nvme"]["written_by_class"] == {"weights": 2 * GB}
    assert r["links"]["nvme"]["bytes_by_direction"] == {"nvme->dram": 3 * GB, "dram->nvme": 2 * GB}
    assert r["links"]["pcie"]["bytes_by_direction"]["dram->hbm"] == 3 * GB
    assert_bytes_conserved(simulate(scenario(two_layers())))


def test_weights_in_host_memory_are_not_read_ahead():
    # offload_param to the CPU: no swapper, and with max_live_parameters binding nothing is
    # gathered ahead (DeepSpeed: min(5e8 - 5e8 live, 5e7) = 0 parameters to prefetch): three
    # serial 0.2 s copies at 5 GB/s (L1 kept for its backward), 3.0 s of compute, 2 x 0.2 s
    # of write-backs: 4.0 s
    r = simulate(scenario(two_layers(weights="dram", pcie="5 GB/s")))
    assert math.isclose(r.time_s, 3 * 0.2 + 3.0 + 2 * 0.2, abs_tol=1e-4)


def test_more_drive_bandwidth_never_slows_and_unlimited_exposes_nothing(swapped):
    faster = simulate(scenario(two_layers(nvme="10 GB/s")))
    assert faster.time_s <= swapped.time_s
    unlimited = simulate(scenario(two_layers(nvme=FAST)))
    # the compute alone: forward 2 x 0.5 s, backward 2 x 1 s
    assert math.isclose(unlimited.time_s, 3.0, abs_tol=1e-3)
    assert unlimited.exposed_transfer_s < 1e-3
