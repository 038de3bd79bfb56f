"""A stage's units where its layers come in runs of alike layers: the workload works out each
run's first layer and copies it for the others, renamed. Each layer's name, parameters and
activations are checked against arithmetic written out here, layer by layer, so a copy taken
from the wrong run, misnamed or miscounted fails."""

from __future__ import annotations

import dataclasses

from engine_helpers import scenario
from test_moe import small

from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

# tests/test_moe.py's small model: h = 64, 4 heads of 16, gated MLP of 128, RMSNorm, no biases;
# its MoE layers: a router over 8 experts of width 32.
ATTENTION = 4 * 64 * 64  # q, k, v, o
NORMS = 2 * 64  # two RMSNorm weights a layer
DENSE_PARAMS = ATTENTION + 3 * 64 * 128 + NORMS  # 41,088
MOE_PARAMS = ATTENTION + 64 * 8 + 8 * 3 * 64 * 32 + NORMS  # 66,176
# one micro-batch's activations of a dense and an MoE layer (tests/test_moe.py, by hand)
DENSE_ACTS, MOE_ACTS = 71_680, 77_568


def _layers(model: dict) -> list:
    return list(build_workload(resolve(scenario(small(model=model)))).units[:-1])


def test_runs_of_alike_layers_each_layer_its_own_name_and_sizes():
    units = _layers({"layers": 6, "first_dense_layers": 3})  # runs: L0-L2 dense, L3-L5 MoE
    assert [u.name for u in units] == ["L0", "L1", "L2", "L3", "L4", "L5"]
    assert [u.params for u in units] == [DENSE_PARAMS] * 3 + [MOE_PARAMS] * 3
    assert [u.activations for u in units] == [DENSE_ACTS] * 3 + [MOE_ACTS] * 3
    assert (DENSE_PARAMS, MOE_PARAMS) == (41_088, 66_176)


def test_alternating_layers_runs_of_one():
    units = _layers({"first_dense_layers": 0, "moe_every": 2})  # MoE where (i + 1) % 2 == 0
    assert [u.name for u in units] == ["L0", "L1", "L2", "L3"]
    assert [u.params for u in units] == [DENSE_PARAMS, MOE_PARAMS] * 2
    assert [u.activations for u in units] == [DENSE_ACTS, MOE_ACTS] * 2


def test_a_runs_copies_differ_from_its_first_only_by_name():
    units = _layers({"layers": 6, "first_dense_layers": 3})
    for run in (units[:3], units[3:]):
        first = dataclasses.replace(run[0], name="")
        assert all(dataclasses.replace(u, name="") == first for u in run)
