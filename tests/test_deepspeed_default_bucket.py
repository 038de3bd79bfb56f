"""DeepSpeed's gradient reduce bucket at its shipped default (`reduce_bucket_size` 5e8
elements, deepspeed/runtime/zero/config.py), a named part of the GPU's memory timeline where
`training.offload.reduce_bucket_size` is left out (state/deepspeed_buckets.py), by hand:

- ZeRO-1/2 (stage_1_and_2.py `setup_buckets`): torch.empty(5e8, dtype=the weights') from
  the backward's first gradient hook to its epilogue; a second with overlap_comm; one, after
  the backwards, under a pipeline (`reduce_gradients(pipeline_parallel=True)`);
- ZeRO-3 (stage3.py `_setup_for_real_optimizer`): torch.empty(5e8) in the communication
  dtype (engine.py: the model's, float32 without fp16 or bf16), made with the optimizer and
  held all step."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.deepspeed_buckets import BUCKET
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import live_parts

BF16 = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}
FP32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
MODEL = {
    "hidden": 64,
    "layers": 2,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 512,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
}


def _raw(zero: int, precision=BF16, framework="deepspeed", **over) -> dict:
    offload = {k: over.pop(k) for k in ("overlap_comm", "reduce_bucket_size") if k in over}
    training = {"framework": framework, "seq_len": 128, "precision": precision}
    if "version" in over:
        training["deepspeed"] = {"version": over.pop("version")}
    training |= {"workspace": "0 B", "optimizer": "adam", "offload": offload}
    parallel = {"data": 2, "zero_stage": zero, **over}
    return {"name": "ds", "model": MODEL, "training": training, "parallel": parallel}


def _timeline(raw: dict):
    r = resolve(scenario(raw))
    return gpu_timeline(r, build_inventory(r))


def _bucket_events(t) -> list[tuple[str, str, int, bool]]:
    named = BUCKET.split(" (")[0]  # the part by whatever size it names
    return [(e.moment, e.phase, e.nbytes, e.alloc) for e in t.events if e.part.startswith(named)]


def test_zero2_holds_one_bucket_of_the_16_bit_weights_through_the_backward():
    t = _timeline(_raw(2))
    # 5e8 elements x 2 B (bf16, self.dtype) = 1,000,000,000 B; overlap_comm off at ZeRO-2
    assert _bucket_events(t) == [
        ("backward: final norm and head", "backward", 1_000_000_000, True),
        ("backward: ZeRO's gradient epilogue", "backward", 1_000_000_000, False),
    ]
    i = next(k for k, e in enumerate(t.events) if e.part == BUCKET)
    assert t.allocated[i] - t.allocated[i - 1] == 1_000_000_000
    # the step's peak is in the backward and holds it; freed before the optimizer's step
    assert t.peak_event.phase == "backward" and t.peak_parts[BUCKET] == 1_000_000_000
    first_step = next(k for k, e in enumerate(t.events) if e.phase == "optimizer")
    assert BUCKET not in live_parts(t.events, first_step)


def test_overlap_comm_doubles_it_and_fp32_weights_double_each_element():
    # two buffers: 2 x 5e8 x 2 B = 2,000,000,000 B
    assert _bucket_events(_timeline(_raw(2, overlap_comm=True)))[0][2] == 2_000_000_000
    # ZeRO-1 with fp32 weights: 5e8 x 4 B = 2,000,000,000 B
    assert _bucket_events(_timeline(_raw(1, FP32)))[0][2] == 2_000_000_000


def test_zero3_holds_its_bucket_all_step():
    t = _timeline(_raw(3))
    # 5e8 x 2 B (bf16 communication dtype) from the start, never freed within the step
    assert _bucket_events(t) == [("start of the step", "start", 1_000_000_000, True)]
    assert live_parts(t.events, len(t.events) - 1)[BUCKET] == 1_000_000_000
    # fp32 weights: engine.py's communication_data_type is float32, 5e8 x 4 B
    assert _bucket_events(_timeline(_raw(3, FP32)))[0][2] == 2_000_000_000


def test_under_a_pipeline_one_buffer_after_the_backwards():
    # reduce_gradients(pipeline_parallel=True): one buffer whatever overlap_comm says
    t = _timeline(_raw(1, pipeline=2, overlap_comm=True))
    at = "backward: ZeRO's gradient epilogue"
    assert _bucket_events(t) == [
        (at, "backward", 1_000_000_000, True),
        (at, "backward", 1_000_000_000, False),
    ]


@pytest.mark.parametrize(
    "raw",
    [
        # before 0.3.17: state/buffers.py's workspace rule, given or left out
        _raw(2, reduce_bucket_size=10_000_000, version="0.3.16"),
        _raw(3, version="0.3.0"),
        _raw(0),  # no ZeRO optimizer, no ipg buffer
        _raw(2, framework="fsdp"),
        _raw(2, framework=None),
    ],
    ids=["v0.3-named", "v0.3-default", "zero0", "fsdp", "generic"],
)
def test_no_default_bucket_where_deepspeed_makes_none_or_the_key_names_it(raw):
    assert _bucket_events(_timeline(raw)) == []


def test_a_given_bucket_under_today_s_release_is_counted_as_the_default_is():
    # the rule follows the release, not whether the key is given: 2e8 elements x 2 B (bf16
    # weights) = 400,000,000 B from the first gradient to the epilogue at ZeRO-2; 1e8 x 2 B =
    # 200,000,000 B all step at ZeRO-3
    first, end = "backward: final norm and head", "backward: ZeRO's gradient epilogue"
    t = _timeline(_raw(2, reduce_bucket_size=200_000_000))
    assert _bucket_events(t) == [
        (first, "backward", 400_000_000, True),
        (end, "backward", 400_000_000, False),
    ]
    t = _timeline(_raw(3, reduce_bucket_size=100_000_000))
    assert _bucket_events(t) == [("start of the step", "start", 200_000_000, True)]
    # DeepSpeed's own default given (5e8) holds what the key left out holds: 1,000,000,000 B
    given = _bucket_events(_timeline(_raw(2, reduce_bucket_size=500_000_000, version="latest")))
    assert given == _bucket_events(_timeline(_raw(2)))
    assert given[0][2] == 1_000_000_000


def test_the_bucket_part_is_named_by_the_size_given():
    # left out: DeepSpeed's default; given, the size the user wrote, in DeepSpeed's own
    # shorthand where it is one digit and zeros (200,000,000 = 2e8), else in full
    def parts(**over) -> set[str]:
        return {e.part for e in _timeline(_raw(2, **over)).events if "reduce bucket" in e.part}

    head = "DeepSpeed reduce bucket (ipg buffer, reduce_bucket_size"
    assert parts() == {f"{head} 5e8 by default)"}
    assert parts(reduce_bucket_size=200_000_000) == {f"{head} 2e8 given)"}
    assert parts(reduce_bucket_size=500_000_000) == {f"{head} 5e8 given)"}
    assert parts(reduce_bucket_size=123_457) == {f"{head} 123,457 given)"}
    assert parts(reduce_bucket_size=250_000_000) == {f"{head} 250,000,000 given)"}
