"""A note where a DeepSpeed ZeRO-1/2 scenario names `training.offload.reduce_bucket_size`:
the key is counted by DeepSpeed v0.3's rule (4.5 x the bucket in fp16, in `workspace`, all
step: state/buffers.py), what the ZeRO-Offload runs tiersim reproduces used, while the key
left out is counted by today's DeepSpeed (its 5e8-element default, one buffer of the weights'
dtype from the backward's first gradient to its end: state/deepspeed_buckets.py). Setting the
key to DeepSpeed's own default, 5e8, thus holds 4.5 times the bytes the key left out holds
(zero-offload-10b-dgx2: 4.50 GB in `workspace` against a 1.00 GB part), and no line said why.
Said only where the key given holds more than the key left out would: a smaller bucket (the
ZeRO-Offload runs' 5e7: 450 MB against 1 GB) surprises nobody, and the shipped scenarios that
name one stay free of notes (tests/test_scenario_notes.py).
"""

from __future__ import annotations

from tiersim.config.framework import offload_plan
from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.core.errors import Problem
from tiersim.core.units import fmt_bytes
from tiersim.state.buffers import FP16, reduce_buffer_elements
from tiersim.state.deepspeed_buckets import DEFAULT_REDUCE_BUCKET

WHERE = "training.offload.reduce_bucket_size"


def reduce_bucket_notes(s: Scenario) -> list[Problem]:
    plan = offload_plan(s)
    bucket = plan.reduce_bucket_size
    if plan.framework != "deepspeed" or bucket is None or s.parallel.zero_stage not in (1, 2):
        return []
    buffers = 2 if plan.overlap_comm else 1
    given = buffers * reduce_buffer_elements(bucket) * FP16
    two = " x 2 buffers (overlap_comm)" if buffers == 2 else ""
    weights = s.training.precision.weights
    today = buffers * DEFAULT_REDUCE_BUCKET * PRECISION_BYTES[weights]
    if given <= today:
        return []
    why = (
        f"{bucket:,} elements counted by DeepSpeed v0.3's rule (what ZeRO-Offload ran): 4.5 x "
        f"the bucket in fp16{two} = {fmt_bytes(given)} in the workspace class, all step; "
        "left out, the bucket is today's DeepSpeed's default, 5e8 elements of the weights' "
        f"{weights}{two} = {fmt_bytes(today)} from the backward's first gradient to its end, "
        "a timeline part of its own (docs/deepspeed-buckets.md)"
    )
    return [Problem(WHERE, why, "W-FRAMEWORK-LIMIT")]
