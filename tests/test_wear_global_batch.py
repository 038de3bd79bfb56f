"""A wear remedy stated as the global batch it implies, where the scenario is written in
`training.global_batch_size` (review 2026-12-07-e: `grad_accumulation >= 191` where the user
gave `global_batch_size: 512`). The scenario reaches the report through the resolved run
(analysis.wear.assess), not by reading the file again. One 1B simulation per case: about 1 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim import api

SEED = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
# optimizer state on HBF at every step wears it out in days: a 5-year budget fails and the
# remedy is a gradient accumulation; micro-batch 2 on one GPU (parallel.data 1)
FAILING = {"placement.optimizer": "hbf", "budget.hbf.lifetime": "5 years"}


@pytest.fixture(scope="module", params=[None, 2])
def wear(request):
    given = {"training.micro_batch_size": 2}
    if request.param is not None:  # 2 = micro_batch_size 2 x grad_accumulation 1 x data 1
        given["training.global_batch_size"] = request.param
    return request.param, api.wear(api.load(SEED, FAILING | given))


def test_the_remedy_names_the_global_batch_where_the_scenario_gives_one(wear):
    written_in_global, w = wear
    hbf = w.dicts()["hbf"]
    g = hbf["remedies"]["grad_accumulation"]
    assert g["at_least"] and g["value"] > 1
    if written_in_global is None:  # no global batch given: the field is left out, as before
        assert "global_batch_size" not in g
        assert "global_batch_size" not in hbf["verdict"]
        return
    # global = grad_accumulation x micro_batch_size 2 x parallel.data 1
    assert g["global_batch_size"] == g["value"] * 2 * 1
    said = f"grad_accumulation >= {g['value']:,} (global_batch_size >= {g['value'] * 2:,}; then "
    assert said in hbf["verdict"]
