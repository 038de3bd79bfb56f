"""FSDP2's one unit over the whole model (`training.offload.fetch: model`, Accelerate's
NO_WRAP) timed as torch 2.13 runs it (tiersim/workload/whole_model.py): one all-gather of every
parameter before the forward (the root's `pre_forward`), kept to the backward (the root is not
resharded after forward), one reduce-scatter of every gradient after the backward (the root's
`post_backward`, from `_root_post_backward_final_callback`, which the compute stream waits
for), every micro-batch; with nothing to compute beside either, both exposed.

The model (engine_helpers.tiny, as tests/test_fsdp_exposure.py): two 1e9-parameter layers of
fp32 weights and gradients (4 GB of each a layer; the rest unit holds none), forward 1 s and
backward 2 s a layer on a 1 TFLOP/s GPU, HBM at 1000 TB/s, data 8 inside one node: NVLink
450 GB/s, 2 us a hop, NCCL at the link's full rate. The whole model's ring all-gather (or
reduce-scatter) over the 8 sends 7/8 of 8 GB in 7 hops: 7e9 / 450e9 + 7 x 2e-6 = 15.56956 ms
alone; a layer's, 3.5e9 B."""

from __future__ import annotations

import pytest
import yaml
from engine_helpers import scenario, tiny

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

WHOLE_B = 7 / 8 * 2 * 4e9  # bytes each rank sends in the whole model's all-gather
WHOLE_S = WHOLE_B / 450e9 + 7 * 2e-6  # ... alone, and the reduce-scatter's
LAYER_B = 7 / 8 * 4e9  # one layer's
COPY_S = 2 * 4e9 / 1e15  # FSDP2's copy-out (or chunk_cat copy-in) of a layer's 4 GB
_RUNS: dict = {}


def _raw(fetch: str = "model", m: int = 1, reshard=None, bandwidth="450 GB/s") -> dict:
    parallel = {"data": 8, "zero_stage": 3}
    if reshard is not None:
        parallel["reshard_after_forward"] = reshard
    return tiny(
        model={"parameters": 2_000_000_000, "layers": 2},
        parallel=parallel,
        training={"framework": "fsdp", "offload": {"fetch": fetch}, "grad_accumulation": m},
        hardware={
            "gpu": {"collective_sm_share": 0.2},
            "network": {"intra_node_bandwidth": bandwidth},
        },
        simulation={"link_sharing": "issue_order"},
    )


def _scenario(**kw):
    return scenario(_raw(**kw))


def run(**kw):
    key = tuple(sorted(kw.items()))
    if key not in _RUNS:
        _RUNS[key] = simulate(_scenario(**kw))
    return _RUNS[key]


def nvlink_bytes(result) -> int:
    return result.links["nvlink"].bytes


def test_the_hand_figure():
    assert pytest.approx(15.56956e-3, rel=1e-6) == WHOLE_S


def test_the_first_layer_carries_one_gather_and_one_reduce_scatter_of_every_unit():
    units = build_workload(resolve(_scenario())).units
    first, others = units[0], units[1:]
    assert first.whole_model
    assert first.dp_weights.nbytes == pytest.approx(WHOLE_B)
    assert first.dp_gradients.nbytes == pytest.approx(WHOLE_B)
    assert first.dp_weights.latency_s == pytest.approx(7 * 2e-6)  # one call's hops, not two
    assert all(u.dp_weights is None and u.dp_gradients is None for u in others)
    # no SM contention (nothing beside the collectives); the copies as each layer's:
    # copy-out before the forward, chunk_cat's copy-in after the backward
    assert first.forward_s == pytest.approx(1.0 + COPY_S, rel=1e-12)
    assert first.backward_s == pytest.approx(2.0 + COPY_S, rel=1e-12)


def test_one_micro_batch_exposes_the_gather_and_the_reduce_scatter():
    # gather (nothing to compute before it), forward L0, L1, backward L1, L0 (still gathered:
    # no gather before the backward), reduce-scatter (waited for), then the optimizer
    r = run()
    compute = 2 * (1.0 + 2.0) + 2 * 2 * COPY_S
    assert r.compute_s == pytest.approx(compute, rel=1e-9)
    assert r.exposed_collective_s == pytest.approx(2 * WHOLE_S, rel=1e-6)
    assert r.time_s == pytest.approx(compute + 2 * WHOLE_S + r.optimizer_s, rel=1e-6)
    assert nvlink_bytes(r) == 2 * 7_000_000_000


def test_each_micro_batch_gathers_and_reduces_again():
    # the root resharded after each backward (reshard_after_backward, True) and its gradients
    # reduced every backward: 2 micro-batches, 4 exposed collectives, one after another
    r = run(m=2)
    assert r.exposed_collective_s == pytest.approx(4 * WHOLE_S, rel=1e-6)
    assert r.compute_s == pytest.approx(2 * (6.0 + 4 * COPY_S), rel=1e-9)
    assert nvlink_bytes(r) == 2 * 2 * 7_000_000_000


def test_reshard_after_forward_true_gathers_again_before_the_backward():
    # an explicit True (not the root's default): resharded after forward, so the backward's
    # pre_backward gathers it all again, exposed, and copies it out again
    r = run(reshard=True)
    assert r.exposed_collective_s == pytest.approx(3 * WHOLE_S, rel=1e-6)
    assert r.compute_s == pytest.approx(6.0 + 2 * 3 * COPY_S, rel=1e-9)
    assert nvlink_bytes(r) == 3 * 7_000_000_000


@pytest.mark.parametrize(("reshard", "layer_reshard", "calls"), [(None, False, 2), (True, True, 3)])
def test_the_bytes_are_the_layer_grains(reshard, layer_reshard, calls):
    # the same all-gather and reduce-scatter bytes a step as a layer a unit gathered as
    # often: 2 layers x 3.5e9 B per gather or reduce-scatter, `calls` of them a layer
    whole, layers = run(reshard=reshard), run(fetch="layer", reshard=layer_reshard)
    assert nvlink_bytes(whole) == nvlink_bytes(layers) == calls * 2 * LAYER_B


def test_weights_on_the_host_come_to_the_gpu_once_for_the_whole_model():
    # FSDP2's CPUOffloadPolicy (weights, gradients and optimizer on the host, the update
    # there): the carrier brings every unit's shard, 2 x 4 GB / 8 ranks = 1e9 B, to the GPU
    # before its gather, no other unit its own; the layer grain kept to the backward brings
    # each layer's 0.5e9 B once: the same bytes. The reduced gradient shards go back, 1e9 B.
    def host(**kw):
        raw = _raw(**kw)
        homes = {"weights": "dram", "gradients": "dram", "optimizer": "dram"}
        raw["placement"] |= homes | {"optimizer_compute": "cpu"}
        return simulate(scenario(raw)).links["pcie"].bytes_by_direction

    whole, layers = host(), host(fetch="layer", reshard=False)
    assert whole == layers == {"dram->hbm": 1_000_000_000, "hbm->dram": 1_000_000_000}


def test_more_bandwidth_never_slows():
    slow, fast = run(), run(bandwidth="900 GB/s")
    assert fast.time_s <= slow.time_s
    assert fast.exposed_collective_s <= slow.exposed_collective_s
    # at twice the rate the bytes' part halves, the hops stay: 7e9 / 900e9 + 14 us, twice
    assert fast.exposed_collective_s == pytest.approx(2 * (7e9 / 900e9 + 7 * 2e-6), rel=1e-6)


def test_the_run_table_says_how_it_is_fetched(cli, tmp_path):
    path = tmp_path / "whole.yaml"
    path.write_text(yaml.safe_dump(_raw()))
    code, table, err = cli("run", path, "--out", tmp_path / "t")
    assert code == 0, err
    (line,) = [x for x in table.splitlines() if x.startswith("Offload")]
    assert "parameters fetched as FSDP2's one unit over the whole model: one all-gather" in line
    assert "a layer at a time" not in line
