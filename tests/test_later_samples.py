"""A shallow model under the pipelined update extrapolates from samples taken later in the step
(tiersim.engine.later_samples), where the first samples fall in the previous step's update.

Llama 2 7B cut to 2 layers, its fp32 master weights and Adam moments on HBF
(scenarios/default.yaml, the pipelined update): each step writes back 4 + 8 bytes a
parameter, of 2 layers of 202,383,360 (4·4096² attention + 3·4096·11,008 MLP + 2·4096
norms) and the embedding and head's 2·32,000·4096 + 4096 = 262,148,096: 666,914,816
parameters, 8,002,977,792 bytes, at HBF's 50 GB/s (the h200-hbf preset): 160.06 ms. The next
step's update reads that state back, so a step whose GPU work (n micro-batches and its own
update) is shorter than the writes is governed by them, and one that is longer by the GPU:
the first samples, 3, 4 and 5 micro-batches (no pipeline, no warm-up forwards: 0 + 3), cross
from one to the other and do not grow alike; the samples twice as far, 6, 7 and 8, are all
the GPU's. Before, the step of any m was then simulated in full.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_steady import differences

from tiersim.config.load import load_scenario
from tiersim.engine.later_samples import Tries, later
from tiersim.runner import report_for
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "scenarios" / "default.yaml"
# a budget the flash holds: no wear remedy's steps simulated beside the point (in full, the
# comparison's would cost seconds)
SHALLOW = ["model.layers=2", "training.optimizer_step=pipelined", "budget.hbf.lifetime=1 day"]
PARAMETERS = 2 * (4 * 4096**2 + 3 * 4096 * 11_008 + 2 * 4096) + 2 * 32_000 * 4096 + 4096
WRITES_S = PARAMETERS * (4 + 8) / 50e9  # the update's write-back, a step, at HBF's rate


def _both(overrides: list[str]) -> tuple[dict, dict]:
    """The report as simulated by default, and with every micro-batch simulated."""
    fast = report_for(load_scenario(DEFAULT, [*SHALLOW, *overrides]))
    full = ["simulation.steady_state=full", *SHALLOW, *overrides]
    return fast, report_for(load_scenario(DEFAULT, full))


@pytest.fixture(scope="module")
def at_64() -> tuple[dict, dict]:
    return _both(["training.grad_accumulation=64"])  # an async checkpoint, as shipped


def test_the_first_samples_cross_from_the_writes_to_the_gpu(at_64):
    # the premise: 4 micro-batches and the update are shorter than the writes, 5 longer
    fast, _ = at_64
    assert PARAMETERS == 666_914_816
    assert fast["tiers"]["hbf"]["bytes_written_per_step"] == PARAMETERS * 12
    step = fast["step"]
    per_micro_batch = step["compute_s"] / 64
    assert 4 * per_micro_batch + step["optimizer_s"] < WRITES_S
    assert 5 * per_micro_batch + step["optimizer_s"] > WRITES_S


def test_a_shallow_pipelined_step_extrapolates_from_later_samples(at_64):
    # three runs (an async checkpoint's drain runs into the micro-batches): 3, 4 and 5 do not
    # repeat; 3 moved on by 3 periods of 1: 6, 7 and 8; 12 + 21 = 33 micro-batches < 64
    fast, full = at_64
    assert fast["sim"]["steady_state"] == "extrapolated"
    assert fast["sim"]["micro_batches_simulated"] == [6, 7, 8]
    assert "steady_state_why" not in fast["sim"]
    assert full["sim"]["steady_state"] == "full"
    assert fast["sim"]["events"] < full["sim"]["events"]  # a fallback would count the same
    assert differences(full, fast, full["step"]["time_s"]) == []


def test_one_run_of_later_samples_without_a_checkpoint():
    # no checkpoint: the samples from one run; of 5 (3, 4 and 5: the 2 micro-batches kept
    # before the two periods and 1 after), then of 8 (6, 7 and 8): 5 + 8 = 13 < 16
    fast, full = _both(["checkpoint.every_steps=null"])
    assert fast["sim"]["steady_state"] == "extrapolated"
    assert fast["sim"]["micro_batches_simulated"] == [8]
    assert differences(full, fast, full["step"]["time_s"]) == []


def test_a_point_that_cannot_afford_later_samples_says_why():
    # 16 micro-batches with the async checkpoint: 3 + 4 + 5 = 12 simulated, and 6 + 7 + 8 =
    # 21 more would be 33 >= 16: simulated in full, and the report says both; the first
    # samples' reason: the previous step's write-backs run on past their periods
    # (tiersim.engine.earlier_reach)
    fast, full = _both([])
    assert fast["sim"]["steady_state"] == "full (no repetition found)"
    why = fast["sim"]["steady_state_why"]
    assert why.startswith(
        "samples of 3, 4 and 5 micro-batches: an op of an earlier step (its update) runs on "
    )
    assert why.endswith(
        "; samples of 6, 7 and 8 would bring the micro-batches simulated to 16 or more, "
        "the step's in full"
    )
    assert fast["sim"]["events"] == full["sim"]["events"]
    assert differences(full, fast, full["step"]["time_s"]) == []


def test_later_samples_are_for_an_update_that_overlaps_the_next_step():
    synchronous = resolve(load_scenario(DEFAULT).scenario)
    assert later(synchronous, (3, 4, 5)) is None
    tries = Tries(synchronous, (3, 4, 5))
    for runs in tries:
        assert runs == (3, 4, 5)
        tries.refused("the reason")
    assert tries.why() == "the reason"  # one try: its reason as it always was
    # interleaved, a period of p = 16 micro-batches: 32 moved on by ceil(32 / 16) periods
    vp = load_scenario(ROOT / "scenarios" / "deepseek-v3-pp16-vp2.yaml", SHALLOW[1:2])
    assert later(resolve(vp.scenario), (32, 48, 64)) == (64, 80, 96)
