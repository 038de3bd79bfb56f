"""PyTorch DDP's gradient buckets in the step's memory timeline (state/ddp_buckets.py):
`framework: fsdp`, `zero_stage: 0`, more than one data rank. Sources:

- torch/csrc/distributed/c10d/reducer.cpp `Reducer::initialize_buckets`: each bucket's flat
  `bucket.gradients = at::empty({offset}, options)`, `offset` the sum of its parameters'
  `numel()`, in their dtype; the buckets cover every parameter.
- torch/nn/parallel/distributed.py, `DistributedDataParallel`'s docstring:
  `gradient_as_bucket_view` True makes gradients "views pointing to different offsets of
  allreduce communication buckets ... the saved memory size will be equal to the total
  gradients size"; False is the default.
"""

from __future__ import annotations

from conftest import parameters, scenario
from test_memory_timeline import TINY, tiny

from tiersim.state.ddp_buckets import DDP_BUCKETS
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline

# TINY by hand: a layer's q, k, v, o 4 x 64 x 64 = 16,384, its gated MLP 3 x 64 x 128 =
# 24,576, two RMSNorms 2 x 64 = 128: 41,088, two layers 82,176; embedding and untied head
# 2 x 32,000 x 64 = 4,096,000; the final norm 64: 4,178,240 parameters
TINY_PARAMS = 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 2 * 32_000 * 64 + 64


def _peak_parts(data: int = 2, zero: int = 0, framework: str | None = "fsdp", **parallel):
    raw = tiny(framework=framework) if framework else tiny()
    raw["parallel"] = {"data": data, "zero_stage": zero, **parallel}
    r = resolve(scenario(raw))
    t = gpu_timeline(r, build_inventory(r))
    return t, t.peak_parts


def test_the_hand_count_is_the_models():
    assert TINY_PARAMS == 4_178_240 == parameters(TINY)


def test_ddp_holds_a_second_copy_of_the_gradients_in_fp32_buckets():
    """fp32 parameters (tiny's precision): 4,178,240 x 4 B = 16,712,960 B of buckets, held
    from the start of the step, so live at the peak, beside the gradients themselves."""
    t, parts = _peak_parts()
    assert TINY_PARAMS * 4 == 16_712_960
    assert parts[DDP_BUCKETS] == 16_712_960
    assert parts["resident gradients"] == 16_712_960
    assert t.events[0].moment == "start of the step"


def test_gradient_as_bucket_view_drops_the_copy():
    """The gradients are the buckets' views: allocated at the peak falls by the buckets'
    16,712,960 B, at the same moment."""
    t_copy, _ = _peak_parts()
    t_view, parts = _peak_parts(gradient_as_bucket_view=True)
    assert DDP_BUCKETS not in parts
    assert t_copy.peak_event.moment == t_view.peak_event.moment
    assert t_copy.peak_allocated_bytes - t_view.peak_allocated_bytes == 16_712_960


def test_no_buckets_where_ddp_does_not_run():
    """One rank (no DDP), ZeRO (FSDP's sharding, not DDP), no framework (tiersim's generic
    engine): no DDP buckets."""
    for kwargs in ({"data": 1}, {"zero": 1}, {"framework": None}):
        _, parts = _peak_parts(**kwargs)
        assert DDP_BUCKETS not in parts, kwargs
