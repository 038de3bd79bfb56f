"""When apex's DistributedFusedAdam makes each gradient shard under NeMo 1.x
(`training.distributed_optimizer: apex`), and what the GPU holds beside it then
(docs/nemo-memory.md, "apex's gradient shards in the cool-down").

apex (apex/contrib/optimizers/distributed_fused_adam.py at d571f3ee) cuts the parameters into
buckets of `bucket_cap_mb` (100 MiB by default) in `grad_sync_dtype`: `shard_size =
int(2**20 * bucket_cap_mb / dtype_bytes / ranks)` rounded down to `128 // dtype_bytes` values,
a bucket `shard_size x ranks` values, one size for every bucket, the fp32 ones included
(state/apex_buckets.py). `_start_bucket_grad_sync` reduce-scatters a bucket into a
new `torch.empty([bucket_size // distributed_size], dtype=grad_sync_dtype)` (none on one rank:
the bucket itself); `_finish_bucket_grad_sync` keeps that tensor as the bucket's `grads_shard`
(with `contiguous_grad_buffer` the bucket is a view of the whole buffer, nothing else is made
or freed) until `zero_grad` (`_grads_buckets.clear()`, the next step's start).

NeMo (megatron_gpt_model.py `configure_optimizers`, megatron_base_model.py) makes one bucket
group (`init_params_bucket`, which starts a fresh apex bucket and syncs the group together)
per Transformer layer, or per model chunk under the interleaved schedule, in reverse order;
the word embeddings and a tied head (`_with_fp32_optimizer`, state/apex_buckets.py
FP32_GRADS) in fp32 buckets of their own; the rest (final norm, an untied output layer) joins
the first layer's group. Each group is whole apex buckets: its values rounded up to buckets,
each with a whole shard.

When the shards are made follows Megatron-Core's schedules (pipeline_parallel/schedules.py)
with NeMo's `no_sync_func` (apex's `no_sync`) and `grad_sync_func` (`reduce_overlap_gradients`,
apex's `try_grad_sync`):

- no pipeline: the last micro-batch's backward runs outside `no_sync`: each layer's group is
  reduce-scattered as its backward completes (the post-backward hooks);
- 1F1B, first stage: sync enabled for the last backward (`rank == 0`): the same, layer by
  layer, with no other micro-batch left; other stages sync everything after their last
  backward (`grad_sync_func(model.parameters())`);
- interleaved: every backward runs under `no_sync`; stage k calls `grad_sync_func` for chunk c
  after backward `j + k`, j the chunk's last one (`grad_sync_microbatch_id = microbatch_id -
  pipeline_parallel_rank`): in the last group of p·v backwards chunk v-1-q's last is the
  (q+1)p-th, so p(v-1-q) - k chunk backwards are left, all of them the cool-down's (their
  forwards done), each holding its saved activations and NeMo's kept output. Chunks with
  none left sync after the flush, with the fp32 buckets (`_force_bucket_grad_sync` at the
  optimizer step).

`bucket_cap_mb` is the run's `training.apex.bucket_cap_mb` (apex's 100 when left out; the
launcher's llama3_8b.yaml at 157ea78b sets 125). Not counted: apex's alignment of each
parameter in its bucket (at most 128 B each); under uneven `parallel.stage_layers` a chunk's
held activations are the stage's mean chunk.
"""

from __future__ import annotations

import math

from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.records import record
from tiersim.state.apex_buckets import (
    FP32,
    bucket_cap_mb,
    buckets_for,
    shard_values,
    stage_values,
)
from tiersim.state.inventory import rank_matrices
from tiersim.state.pipeline_outputs import PIPELINE_OUTPUTS
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import shard_divisors
from tiersim.state.timeline import Steps

APEX_GRAD_SHARDS = "reduce-scattered gradient shards (apex DistributedFusedAdam)"
HELD = "saved activations (other micro-batches)"


@record
class Group:
    """One NeMo bucket group: `buckets` apex buckets, one shard of each made at its sync."""

    label: str  # "layer 11", "chunk 5", as the timeline's moment names it
    values: int
    buckets: int
    nbytes: int  # buckets x shard values x dtype bytes


def group(label: str, values: int, dtype_bytes: int, shard: int, ranks: int) -> Group:
    """`shard`: apex's one default_shard_size, for the fp32 buckets too."""
    count = buckets_for(values, shard * ranks)
    return Group(label, values, count, count * shard * dtype_bytes)


@record
class Sync:
    """A group reduce-scattered in the cool-down with `left` chunk backwards (or, in the last
    micro-batch's backward, `left` of the stage's layers) still to run."""

    group: Group
    left: int
    share: float  # of one micro-batch's stage share of saved activations, still held
    outputs: int  # NeMo's kept chunk outputs still held


@record
class ApexShards:
    in_backward: dict[int, Group]  # layer index: made as that layer's backward completes
    cool_down: tuple[Sync, ...]  # made in the cool-down, after the simulated backward
    at_step: int  # bytes made after the flush (fp32 buckets, chunks with no backward left)
    at_step_buckets: int = 1  # the tensors they are (one a bucket)
    unit: float = 1.0  # the cool-down drains a micro-batch's stage share by this much at once


NONE = ApexShards({}, (), 0)


def apex_shards(r: Resolved, stage: int) -> ApexShards:
    """Each bucket group's shards and when `stage`'s GPU makes them (the module's docstring)."""
    ex, par = r.execution, r.execution.parallel
    if ex.training.distributed_optimizer != "apex" or ex.training.framework != "megatron":
        return NONE
    dense_div, expert_div = shard_divisors(par)
    if dense_div == 1:
        return NONE  # one rank: the bucket itself is the shard
    grad = PRECISION_BYTES[ex.training.precision.gradients]
    shard = shard_values(grad, dense_div, bucket_cap_mb(ex.training))
    values = stage_values(r, rank_matrices(r, stage), stage)
    groups = [group(label, x, grad, shard, dense_div) for label, x in values.groups]
    fp32 = group("embeddings", values.fp32, max(grad, FP32), shard, dense_div)
    step = fp32.nbytes + math.ceil(values.routed / expert_div) * grad
    last = (step, fp32.buckets + (1 if values.routed else 0))  # the routed experts' as one
    p, v, n = par.pipeline, par.virtual_pipeline, len(groups)
    if v > 1:
        return _interleaved(groups, stage, p, last)
    if p == 1:
        return ApexShards(dict(enumerate(groups)), (), *last)
    if stage > 0:  # grad_sync_func after the last backward: everything after the flush
        made, count = sum(g.nbytes for g in groups), sum(g.buckets for g in groups)
        return ApexShards({}, (), step + made, last[1] + count)
    syncs = tuple(Sync(g, i, i / n, 0) for i, g in reversed(list(enumerate(groups))))
    return ApexShards({}, syncs, *last, unit=1 / n)


def _interleaved(groups: list[Group], stage: int, p: int, last: tuple) -> ApexShards:
    """Chunk v-1-q's group after its last backward plus `stage`'s rank: p(v-1-q) - k chunk
    backwards left, each holding a chunk's share and its kept output."""
    v, (step, count) = len(groups), last
    syncs = []
    for q in range(v):
        g = groups[v - 1 - q]
        left = p * (v - 1 - q) - stage
        if left > 0:
            syncs.append(Sync(g, left, left / v, left))
        else:  # none left: after the flush
            step, count = step + g.nbytes, count + g.buckets
    return ApexShards({}, tuple(syncs), step, count, unit=1 / v)


@record
class Drained:
    """What the cool-down drains, one allocation a unit (a chunk micro-batch's saved
    activations, one kept output), so that a unit's backward frees its own."""

    key: str
    part: str
    whole: float  # bytes of what `Sync` counts in: a micro-batch's stage share, an output
    unit: float  # bytes an allocation
    per_byte: float  # tensors a byte

    def hold(self, steps: Steps, at: str, phase: str, nbytes: float, whole=False) -> None:
        """`nbytes` more, in units (the last one what is left), each one block where `whole`
        (as the start holds the other micro-batches' activations), else its tensors."""
        k = sum(1 for key in steps.held if key.startswith(self.key + " "))
        while nbytes >= 1 and self.unit > 0:
            size = min(self.unit, nbytes)
            pieces = 1 if whole else max(1, math.ceil(size * self.per_byte))
            steps.alloc(at, phase, f"{self.key} {k}", self.part, size, pieces)
            nbytes, k = nbytes - size, k + 1

    def drain(self, steps: Steps, at: str, target: float) -> None:
        """Down (or up: the forwards run since the simulated step's) to `target` bytes."""
        keys = [key for key in steps.held if key.startswith(self.key + " ")]
        total = sum(steps.held[key] for key in keys)
        while keys and total - steps.held[keys[-1]] >= target - 1:
            total -= steps.held[keys[-1]]
            steps.free(at, "backward", keys.pop(), self.part)
        self.hold(steps, at, "backward", target - total)


def drained(shards: ApexShards, share: tuple, output: int) -> tuple[Drained, Drained]:
    """The saved activations (`share`: one micro-batch's stage share, its bytes and tensors)
    and NeMo's kept outputs (`output`: one's bytes), as the cool-down drains them."""
    whole, items = share
    acts = Drained("held", HELD, whole, whole * shards.unit, items / max(whole, 1))
    return acts, Drained("pipeline outputs", PIPELINE_OUTPUTS, output, output, 1 / max(output, 1))


def cool_down_events(steps: Steps, shards: ApexShards, held: tuple, working) -> bool:
    """The cool-down after the simulated micro-batch's backward: at each sync, what is still
    held (`held`: the saved activations and kept outputs, `drained`), the group's shards,
    then the next backward's first layer (`working`: its (part, bytes)). True where any."""
    acts, outputs = held
    b = "backward"
    for s in shards.cool_down:
        unit = "chunk backwards" if s.group.label.startswith("chunk") else "layers' backward"
        at = f"cool-down: {s.group.label}'s gradients reduce-scattered ({s.left} {unit} left)"
        acts.drain(steps, at, s.share * acts.whole)
        outputs.drain(steps, at, s.outputs * outputs.whole)
        key, g = f"apex {s.group.label}", s.group
        steps.alloc(at, b, key, APEX_GRAD_SHARDS, g.nbytes, g.buckets)
        for part, nbytes in working if s.left else ():  # the next backward's first layer
            steps.alloc(at, b, f"cool-down {part}", part, nbytes, 3)
        for part, _ in working:
            steps.free(at, b, f"cool-down {part}", part)
    return bool(shards.cool_down)


def flushed(steps: Steps, at: str) -> None:
    """The pipeline's flush: the optimizer steps after every micro-batch's backward (Megatron's
    schedules end with the cool-down backwards, then `optimizer.step()`), so no other
    micro-batch's activations nor kept output is left by then."""
    for key in [k for k in steps.held if k.startswith(("held", "pipeline outputs"))]:
        steps.free(at, "backward", key, HELD if key.startswith("held") else PIPELINE_OUTPUTS)
