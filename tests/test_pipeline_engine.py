"""The engine's pipeline reduction (one stage simulated, the others through the all-stage
schedule) against the closed form for uniform stages: (v·m + p − 1)·(f + b), Narayanan et
al. 2021 §2.2."""

import math

import pytest
from engine_helpers import scenario, tiny

from tiersim.simulate import simulate


@pytest.mark.parametrize(
    ("layers", "pipeline", "virtual", "micro_batches"),
    [(4, 4, 1, 8), (8, 4, 2, 8), (4, 2, 1, 1), (8, 2, 2, 4)],
)
def test_uniform_pipeline_matches_the_closed_form(layers, pipeline, virtual, micro_batches):
    # 1e9 parameters and 1 s of forward per layer (1e12 FLOP at 1 TFLOP/s), backward 2 s;
    # nothing moves. One chunk has layers / (p·v) layers: f = that many seconds, b = 2f.
    raw = tiny(
        model={"parameters": 1_000_000_000 * layers, "layers": layers},
        training={"grad_accumulation": micro_batches},
        parallel={"pipeline": pipeline, "virtual_pipeline": virtual},
    )
    r = simulate(scenario(raw))
    f = layers / (pipeline * virtual)
    expected = (virtual * micro_batches + pipeline - 1) * 3 * f
    # plus this stage's SGD update: (4 + 4 + 4) bytes touched per parameter at 1 PB/s
    stage_params = 1e9 * layers / pipeline
    expected += 12 * stage_params / 1e15
    assert math.isclose(r.time_s, expected, rel_tol=1e-9)
    assert math.isclose(r.pipeline_bubble_s, (pipeline - 1) * 3 * f, rel_tol=1e-9)
