"""Ground truth for FSDP2's step timeline: real FSDP2 steps on N CPU processes (gloo on
127.0.0.1), each rank's allocations recorded with the profiler's memory events as
step_timeline.py records one process: transformers' model, `fully_shard` on every decoder layer
and on the root, a warm-up step, then the recorded one (`zero_grad(set_to_none=False)`, forward,
backward, the optimizer's step). Before it, each rank holds its shards of the weights, the
gradients and the optimizer state; the recorded events add to that. The ranks run every job
they are given in one process group (forked once), rank 0's peaks come back; only rank 0
records (the others run the same step unrecorded: what they allocate is not read, and the
profiler's cost is rank 0's alone).

gloo runs each collective on a worker thread of its own, and the profiler only sees the
allocations and frees of the thread that records: the worker drops its reference to the
collective's tensors when it loops for the next one, so whether FSDP2's buffer is freed where
FSDP2 drops it (seen) or later on the worker (unseen) is a race. The collectives here go
through FSDP2's own hooks (`set_custom_all_gather` / `set_custom_reduce_scatter`): the same
`all_gather_single`, and gloo's reduce-scatter algorithm run from here (a clone of the input,
all-reduced, the rank's chunk copied out: ProcessGroupGloo.cpp, reduce_scatter_tensor_coalesced),
each returning once the worker has let go of its tensors (groundtruth/settled_collectives.py:
their storage's use count back to what it was before the collective): every buffer is then
freed on the recording thread, where FSDP2 drops it. The recorded step leaves nothing
allocated that it did not start with (StepPeaks.left_bytes 0).

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # FSDP2 imports it lazily in every rank otherwise
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)

from tiersim.config.schema import Scenario
from tiersim.groundtruth import hfmodels
from tiersim.groundtruth.fsdp2 import free_port
from tiersim.groundtruth.quiet_profiler import memory_profile
from tiersim.groundtruth.selective import set_recompute as set_recompute  # its home before
from tiersim.groundtruth.settled_collectives import Wait, settle, settled_collectives
from tiersim.groundtruth.step_peaks import StepPeaks, measured_peaks
from tiersim.groundtruth.step_timeline import train_step
from tiersim.groundtruth.torchmodels import APART, make_optimizer
from tiersim.state.activations import accounting_for
from tiersim.state.model import Transformer
from tiersim.state.resolved import resolve


class SettledAllGather(DefaultAllGather):
    """FSDP2's all-gather (dist.all_gather_single), returning once gloo's worker has let go
    of its input and its output: FSDP2 frees its buffers, where the profiler sees them."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        def issue(view_in: torch.Tensor, view_out: torch.Tensor) -> Wait:
            return dist.all_gather_single(view_out, view_in, group=group, async_op=True).wait

        settle((input_tensor, output_tensor), issue, "FSDP2's all-gather")


class SettledReduceScatter(DefaultReduceScatter):
    """gloo's reduce-scatter as ProcessGroupGloo::reduce_scatter_tensor_coalesced runs it (a
    clone of the input, an all-reduce of the clone, the rank's chunk copied into the output),
    from here, so that the clone is freed on this thread once the worker has let go of it:
    in gloo's own, the worker's all-reduce work may hold the clone last and free it unseen."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        clone = input_tensor.clone()

        def issue(view: torch.Tensor) -> Wait:
            return dist.all_reduce(view, op=op, group=group, async_op=True).wait

        settle((clone,), issue, "FSDP2's reduce-scatter")
        output_tensor.copy_(clone.chunk(group.size())[group.rank()])


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _storages(t: torch.Tensor) -> list:
    """The storages behind (the local shard of) `t`; a tensor subclass's (torchao's
    OptimState8bit: its codes, scale and map), those of the tensors it is made of."""
    t = _local(t)
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return [st for name in names for st in _storages(getattr(t, name))]
    return [t.untyped_storage()]


def _stored(tensors) -> int:
    """Bytes of the distinct storages behind the (local shards of) `tensors`."""
    storages = [st for t in tensors for st in _storages(t)]
    return sum({st.data_ptr(): st.nbytes() for st in storages}.values())


_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def mixed_precision(s: Scenario) -> MixedPrecisionPolicy:
    """FSDP2's policy for `s`: the parameters (built in `training.precision.weights`) gathered
    and computed in the compute precision, reduced in `training.precision.gradients`; the
    default policy (no cast) where both are the weights'."""
    prec = s.training.precision
    if prec.compute_precision == prec.weights and prec.gradients == prec.weights:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(_DTYPES[prec.compute_precision], _DTYPES[prec.gradients])


def _sharded(
    net: Any, reshard: bool, policy: MixedPrecisionPolicy, whole: bool, explicit: bool = False
) -> None:
    """fully_shard on every decoder layer (`reshard_after_forward` as given), then the root
    (embeddings, final norm, head; FSDP2 keeps the root's gathered from forward to backward),
    each with `policy`; `whole`: on the root alone (one unit over the whole model, Accelerate's
    NO_WRAP: `training.offload.fetch: model`); `explicit`: `reshard_after_forward: true` given,
    passed to the root too (as Accelerate passes it), which then reshards after forward."""
    layers = [] if whole else hfmodels.layers_of(net)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=reshard, mp_policy=policy)
    root = {"reshard_after_forward": True} if explicit else {}  # else torch keeps the root's
    fully_shard(net, mp_policy=policy, **root)
    for module in [*layers, net]:
        module.set_custom_all_gather(SettledAllGather())
        module.set_custom_reduce_scatter(SettledReduceScatter())


def sharded_model(s: Scenario, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    """transformers' model of `s` in `dtype` (no recompute set) under FSDP2 with its mixed
    precision (`mixed_precision`), and the rank's input ids (the same on every rank: one
    seed)."""
    m = resolve(s).model
    assert isinstance(m, Transformer)
    acc = accounting_for(s, "cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = hfmodels.build(
            m, hfmodels.family_of(m, s.model.family), acc, s.seq_len, _DTYPES[dtype]
        )
        ids = torch.randint(0, m.vocab, (s.training.micro_batch_size, s.seq_len))
    whole = s.training.offload.fetch == "model"
    given = s.parallel.reshard_after_forward
    _sharded(net, given is not False, mixed_precision(s), whole, explicit=given is True)
    return net, ids


def held_bytes(net: Any, optimizer: Any) -> int:
    """What the rank holds between steps: its shards of the weights, of the gradients and of
    the optimizer state (each storage once)."""
    params = list(net.parameters())
    state = [
        v
        for st in optimizer.state.values()
        for k, v in st.items()
        if torch.is_tensor(v) and k not in APART
    ]
    return _stored(params) + _stored([p.grad for p in params]) + _stored(state)


def recorded_step(net: Any, optimizer: Any, ids: Any) -> StepPeaks | None:
    """One more training step; on rank 0 recorded with the profiler's memory events (its
    peaks returned), on the other ranks run alike unrecorded (None: only rank 0's are read).
    DTensor's own collectives, in Muon's step (groundtruth/muon_dtensor.py), settled on every
    rank, so that every rank issues the same collectives."""
    base = held_bytes(net, optimizer)
    if dist.get_rank() != 0:
        with settled_collectives():
            train_step(net, [optimizer], ids, recorded=False)
        return None
    with settled_collectives(), memory_profile() as prof:
        train_step(net, [optimizer], ids, recorded=True)
    return measured_peaks(prof, base)


def record_rank_step(s: Scenario, dtype: str, make: Any = None, seed: int = 0) -> StepPeaks | None:
    """One rank: transformers' model of `s` under FSDP2, a warm-up step, the recorded one;
    `make(named_parameters)` builds the optimizer where given (else the registry's)."""
    net, ids = sharded_model(s, dtype, seed)
    set_recompute(net, s.training.recompute, net.config._attn_implementation)
    named = list(net.named_parameters())
    optimizer = make(named) if make else make_optimizer(s.training.optimizer, named)
    train_step(net, [optimizer], ids, recorded=False)  # warm-up: the optimizer state exists
    return recorded_step(net, optimizer, ids)


def record_job(s: Scenario, dtype: str, make: Any = None) -> list[dict | None]:
    """A task for run_on_ranks (bound with functools.partial): the rank's recorded step of
    `s` in `dtype` (`make` as record_rank_step's), or the error PyTorch (or an optimizer's
    package) raised in it: every rank raises it alike, at the same operation, so the ranks go
    on together."""
    try:
        got = record_rank_step(s, dtype, make)
        return [got.__dict__ if got else None]
    except RuntimeError as e:
        return [{"error": f"{type(e).__name__}: {e}"}]


def gradient_shards_job(s: Scenario) -> list[dict]:
    """A task for run_on_ranks: the rank's `.grad` shards after one step of `s` (its model
    built in `training.precision.weights`, under its mixed precision): their bytes (each
    storage once) and dtypes."""
    net, ids = sharded_model(s, s.training.precision.weights)
    named = list(net.named_parameters())
    train_step(net, [make_optimizer(s.training.optimizer, named)], ids, recorded=False)
    grads = [p.grad for _, p in named]
    return [{"bytes": _stored(grads), "dtypes": sorted({str(g.dtype) for g in grads})}]


def _worker(rank: int, world: int, port: int, out: str, tasks: list) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        got = [outcome for task in tasks for outcome in task()]
        if rank == 0:
            Path(out, "rank0.json").write_text(json.dumps(got))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_on_ranks(tasks: list[Callable[[], list]], world: int) -> list[dict]:
    """Each task run in turn on `world` gloo ranks, forked once for them all (the tasks reach
    them in the fork; each returns its outcomes, JSON's kinds): rank 0's outcomes, in order."""
    with tempfile.TemporaryDirectory(prefix="tiersim-fsdp2-step-") as out:
        args = (world, free_port(), out, tasks)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
        return json.loads(Path(out, "rank0.json").read_text())


def outcome(got: dict) -> StepPeaks | str:
    """A recorded step's peaks, or the error PyTorch raised in it."""
    return got["error"] if "error" in got else StepPeaks(**got)


def record_fsdp_outcomes(jobs: list[tuple], world: int) -> list[StepPeaks | str]:
    """Rank 0's recorded step of each job (a scenario, the dtype its model is trained in, and
    optionally a function building its optimizer from the named parameters) on
    `world` gloo ranks, forked once for them all (the jobs reach them in the fork); a job
    PyTorch cannot run comes back as the error it raised."""
    return [outcome(g) for g in run_on_ranks([partial(record_job, *job) for job in jobs], world)]


def record_fsdp_steps(jobs: list[tuple[Scenario, str]], world: int) -> list[StepPeaks]:
    """As record_fsdp_outcomes, every job's step recorded (a RuntimeError where one failed)."""
    got = record_fsdp_outcomes(jobs, world)
    for g in got:
        if isinstance(g, str):
            raise RuntimeError(g)
    return [g for g in got if isinstance(g, StepPeaks)]
