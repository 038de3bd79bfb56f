"""HSDP (`parallel.shard_group`) and FSDP2's `reshard_after_forward`: shard sizes and the
collectives of one unit, with the arithmetic written out. The model: one 1e9-parameter layer,
fp32 weights and gradients (4 B each), SGD (no optimizer state), data 16."""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

WHOLE = 4e9  # bytes of weights (and of gradients): 1e9 x 4 B


def resolved(**parallel):
    return resolve(scenario(tiny(parallel={"data": 16, "zero_stage": 3, **parallel})))


def layer(r):
    return build_workload(r).units[0]


def test_fsdp_shards_over_all_data_ranks():
    # FSDP over 16: 4e9 / 16 = 250 MB each of weights and gradients; a reduce-scatter over 16
    # sends 15/16 of the 4 GB buffer: 3.75 GB; the weights' all-gather the same
    r = resolved()
    inv = build_inventory(r).per_gpu
    assert inv["weights"] == inv["gradients"] == 250_000_000
    u = layer(r)
    assert u.dp_gradients.nbytes == pytest.approx(WHOLE * 15 / 16)
    assert u.dp_weights.nbytes == pytest.approx(WHOLE * 15 / 16)


def test_hsdp_shards_within_the_group_and_reduces_across_replicas():
    # shard_group 4: 16 = 4 replicas x 4; each GPU holds 4e9 / 4 = 1 GB of each
    r = resolved(shard_group=4)
    inv = build_inventory(r).per_gpu
    assert inv["weights"] == inv["gradients"] == 1_000_000_000
    u = layer(r)
    # gradients: reduce-scatter within the 4 (3/4 x 4 GB = 3 GB sent), then the 1 GB shard
    # all-reduced across the 4 replicas (2 x 3/4 x 1 GB = 1.5 GB): 4.5 GB
    assert u.dp_gradients.nbytes == pytest.approx(3e9 + 1.5e9)
    assert u.dp_gradients.group == "shard"
    # weights: all-gathered within the shard group only: 3/4 x 4 GB = 3 GB
    assert u.dp_weights.nbytes == pytest.approx(3e9)


def test_hsdp_with_context_shards_over_shard_x_context():
    # context 2 (the model has no attention: only the layout): FSDP shards over shard 4 x
    # context 2 = 8 ranks: 4e9 / 8 = 500 MB; replicas all-reduce 4e9 / 8 each
    r = resolve(
        scenario(
            tiny(
                parallel={"data": 16, "zero_stage": 3, "shard_group": 4, "context": 2},
                training={"seq_len": 1000},
            )
        )
    )
    inv = build_inventory(r).per_gpu
    assert inv["weights"] == 500_000_000
    u = layer(r)
    # reduce-scatter over 8: 7/8 x 4 GB = 3.5 GB; all-reduce of 0.5 GB over 4: 0.75 GB
    assert u.dp_gradients.nbytes == pytest.approx(3.5e9 + 0.75e9)


def test_no_reshard_after_forward_keeps_the_weights_sharded_at_rest():
    # reshard_after_forward: false changes when the gathered weights are freed (after the
    # backward, not the forward), not what is stored: 4e9 / 16 = 250 MB of weights and of
    # gradients per GPU; an all-gather of 15/16 x 4 GB before each forward; the parameters
    # are updated as shards, so no all-gather after the update
    r = resolved(reshard_after_forward=False)
    inv = build_inventory(r).per_gpu
    assert inv["weights"] == 250_000_000
    assert inv["gradients"] == 250_000_000
    u = layer(r)
    assert u.dp_weights.nbytes == pytest.approx(WHOLE * 15 / 16)
    assert u.dp_parameters is None


def test_refusals(cli, write):
    doc = tiny(parallel={"data": 16, "zero_stage": 1, "reshard_after_forward": False})
    code, out, err = cli("validate", write(doc))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "parallel.reshard_after_forward: is false, but the weights are not sharded" in err
    doc = tiny(parallel={"data": 12, "zero_stage": 3, "shard_group": 5})
    code, _, err = cli("validate", write(doc))
    assert code == 2
    assert "parallel.shard_group: is 5: the data-parallel size (12" in err
    assert "expected one of 1, 2, 3, 4, 6, 12" in err
