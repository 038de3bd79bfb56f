"""Parallel-training invariants: network bandwidth, data-parallel collectives, sharding."""

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.config.load import build
from tiersim.runner import simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

SMALL = {
    "layers": 4,
    "hidden": 256,
    "heads": 8,
    "ffn_hidden": 1024,
    "vocab": 1000,
    "max_positions": 512,
}

parallel = st.fixed_dictionaries(
    {
        "data": st.sampled_from([1, 2, 4, 16]),
        "tensor": st.sampled_from([1, 2, 4]),
        "pipeline": st.sampled_from([1, 2]),
        "zero_stage": st.integers(0, 3),
        "sequence": st.booleans(),
        "overlap_tensor_backward": st.booleans(),
    }
)


def scenario(par, network=None, grad_accumulation=4):
    raw = {
        "name": "par",
        "model": SMALL,
        "training": {"seq_len": 512, "grad_accumulation": grad_accumulation},
        "parallel": par,
        "hardware": {
            "network": network
            or {"intra_node_bandwidth": "100 GB/s", "inter_node_bandwidth": "10 GB/s"}
        },
    }
    return build(raw, Path("."), "par.yaml").scenario


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(parallel)
def test_more_network_bandwidth_never_slows_a_step(par):
    slow = simulate(scenario(par)).time_s
    fast = simulate(
        scenario(par, {"intra_node_bandwidth": "400 GB/s", "inter_node_bandwidth": "50 GB/s"})
    ).time_s
    assert fast <= slow * (1 + 1e-9)


@SETTINGS
@given(parallel)
def test_data_parallel_size_one_moves_no_gradients_over_the_network(par):
    def data_bytes(r):
        return sum(link.bytes_by_direction.get("data", 0) for link in r.links.values())

    assert data_bytes(simulate(scenario({**par, "data": 1}))) == 0
    assert data_bytes(simulate(scenario({**par, "data": 4}))) > 0


@SETTINGS
@given(parallel)
def test_sharding_never_raises_per_gpu_memory(par):
    totals = [
        build_inventory(resolve(scenario({**par, "zero_stage": z}))).per_gpu for z in range(4)
    ]
    for lower, higher in itertools.pairwise(totals):
        for cls in ("weights", "gradients", "master", "optimizer"):
            assert higher[cls] <= lower[cls]
        assert higher.total <= lower.total


def test_data_parallel_gradient_bytes_by_hand():
    # One 4-layer stage, t = p = 1, d = 4, no sharding: one all-reduce of the bf16 gradients
    # per step, ring: each GPU sends 2(n-1)/n = 1.5 x the buffer.
    # The explicit model has no biases, LayerNorm (weight + bias), untied embeddings:
    # per layer 4·256² (q, k, v, o) + 2·256·1024 (MLP) + 2·2·256 (two norms) = 787,456;
    # x 4 layers = 3,149,824; word embedding 1000·256 + learned positions 512·256 = 387,072;
    # final norm 2·256 = 512; untied output head 1000·256 = 256,000. Total 3,793,408.
    params = (
        4 * (4 * 256**2 + 2 * 256 * 1024 + 4 * 256) + 1000 * 256 + 512 * 256 + 2 * 256 + 1000 * 256
    )
    assert params == 3_793_408
    r = simulate(scenario({"data": 4}))  # four GPUs of one node: over NVLink
    assert r.links["nvlink"].bytes_by_direction == {"data": int(1.5 * 2 * params)}
