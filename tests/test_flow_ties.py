"""A flow that ends at the instant other flows start (equal in exact arithmetic, an ulp apart
in floating point) ends then, whichever float comes first: with `issue_order` sharing, a
higher-priority flow starting a hair before a lower one's last byte must not preempt it for
the whole of its own transfer. Found by hypothesis (tests/test_steady.py): the step's HBM
occupancy jumped at 13 micro-batches, so extrapolating from 3, 4 and 5 missed it."""

from __future__ import annotations

import math

from engine_helpers import scenario
from test_engine_properties import build_raw

from tiersim.engine.simulate import simulate

# CPU optimizer (timed ops); three write-backs and the next step's weight fetch on the PCIe
# direction dram->hbm (10 GB/s) in priority order: master 4 GB (0.4 s), momentum 4 GB (0.8 s),
# fetch 2 GB: it ends at 1.0 s, exactly when the next unit's CPU update (1.0 s) ends and its
# write-backs, of higher priority, start
CASE = {
    "layers": 2,
    "optimizer": "sgd_momentum",
    "weights": "dram",
    "gradients": "nvme",
    "master": "hbm",
    "opt_state": "hbm",
    "activations": "nvme",
    "compute": "cpu",
    "pcie": "10 GB/s",
    "nvme": "1 GB/s",
    "recompute": "none",
    "step": "pipelined",
}


def _run(m: int, steady: str = "full"):
    raw = build_raw({**CASE, "mb": m})
    raw["simulation"] = {"link_sharing": "issue_order", "steady_state": steady}
    return simulate(scenario(raw))


def test_each_micro_batch_adds_the_same_occupancy_integral():
    # the step repeats micro-batch to micro-batch: time x mean occupancy grows by the same
    # byte-seconds from each count to the next (12 -> 13 jumped by 4e8 B s before)
    integral = {
        m: (r.tiers["hbm"].mean_bytes * r.time_s) for m in (11, 12, 13, 14) for r in [_run(m)]
    }
    growth = [integral[m + 1] - integral[m] for m in (11, 12, 13)]
    assert all(math.isclose(g, growth[0], rel_tol=1e-9) for g in growth), growth


def test_extrapolated_and_full_agree_where_a_flow_ends_as_others_start():
    fast, full = _run(13, "extrapolate"), _run(13)
    assert fast.steady_state == "extrapolated"
    for name, f in full.tiers.items():
        assert math.isclose(fast.tiers[name].mean_bytes, f.mean_bytes, rel_tol=1e-9), name
