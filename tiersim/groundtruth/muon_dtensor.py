"""Ground truth for Muon's step on FSDP2's sharded parameters: torch.optim.Muon (torch 2.13)
stepping weights under `fully_shard` (DTensors sharded on their rows) on W gloo CPU ranks: one
weight, or a layer's, with the shapes its nn.Linear modules have. Its allocations recorded with
the profiler's memory events as the step's ground truth records a whole step
(step_timeline.py), the collectives DTensor runs counted by name and by the bytes of the tensor
each is given (the profiler's shapes and dtypes of gloo's events), and the FLOPs of its matrix
multiplications on the rank (the profiler's, of the local matmuls).
Compared with state/muon_sharded.py by tests/test_muon_sharded.py.

DTensor's collectives are functional collectives (`_c10d_functional`), which gloo runs on a
worker thread of its own: the worker drops its reference to a finished collective's tensors
after `wait_tensor` returns, and a tensor it drops last is freed there, unseen by the profiler
(which records the recording thread's allocations), and counted as never freed.
`settled_collectives` (groundtruth/settled_collectives.py) returns from each collective only
once the worker has let go of its tensors, while the caller still holds them, so that every
free happens, and is seen, on the recording thread.

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import Counter
from dataclasses import field
from pathlib import Path

import torch
import torch._dynamo  # FSDP2 imports it lazily in every rank otherwise
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor
from torch.profiler import ProfilerActivity

from tiersim.core.records import record
from tiersim.groundtruth.fsdp2 import free_port
from tiersim.groundtruth.quiet_profiler import quiet_profile
from tiersim.groundtruth.settled_collectives import settled_collectives

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MATMULS = ("aten::mm", "aten::addmm")
ELEMENT_BYTES = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8}  # kineto's names


@record
class MuonStep:
    """Rank 0's recorded Muon step of one or more weights."""

    peak_bytes: int  # the most its transients held at once (beyond weights, grads, state)
    left_bytes: int  # what it left allocated (0: every free seen)
    collectives: dict[str, int]  # gloo's collectives by name (all_gather, all_reduce)
    matmul_flops: float  # the profiler's FLOPs of the local matmuls
    # [name, bytes of the rank's tensor (an all-gather's shard), calls], by name and size
    collective_sizes: list[list] = field(default_factory=list)


Shapes = tuple[tuple[int, int], ...]  # weights' [out, in], as nn.Linear holds them


def _memory_peak(prof) -> tuple[int, int]:
    """(peak, left) of the recorded thread's allocations, in the order they happened."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    return peak, current


def _collectives(prof) -> tuple[dict[str, int], list[list]]:
    """gloo's collectives by name, and by name and the bytes of the tensor each was given."""
    names: Counter = Counter()
    sizes: Counter = Counter()
    for e in prof.profiler.kineto_results.events():
        if e.name().startswith("gloo:"):
            name = e.name()[5:]
            shape, dtype = e.shapes()[0], e.dtypes()[0]
            names[name] += 1
            sizes[name, math.prod(shape) * ELEMENT_BYTES[dtype]] += 1
    return dict(names), [[n, b, k] for (n, b), k in sorted(sizes.items())]


def _sharded_weights(shapes: Shapes, dtype: str) -> list:
    """One `fully_shard` group of bias-free linear layers, their gradients set (DTensors)."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(
        *(torch.nn.Linear(i, o, bias=False).to(DTYPES[dtype]) for o, i in shapes)
    )
    fully_shard(layers)
    weights = [layer.weight for layer in layers]
    for w in weights:
        grad = torch.randn(*w.shape, dtype=DTYPES[dtype])
        w.grad = distribute_tensor(grad, w.device_mesh, w.placements)
    return weights


def _record(shapes: Shapes, dtype: str) -> MuonStep | None:
    """The step on this rank: on rank 0 recorded (its MuonStep), on the others run alike
    unrecorded (None: only rank 0's is read, and the profiler's cost, its shapes, FLOPs and
    event walks, is rank 0's alone, as in fsdp2_step.recorded_step). Every rank's collectives
    settled, so that every rank issues the same ones."""
    optimizer = torch.optim.Muon(_sharded_weights(shapes, dtype), lr=1e-3)
    optimizer.step()  # warm-up: the momentum buffers exist
    if dist.get_rank() != 0:
        with settled_collectives():
            optimizer.step()
        return None
    with (
        settled_collectives(),
        quiet_profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_flops=True,
        ) as prof,
    ):
        optimizer.step()
    peak, left = _memory_peak(prof)
    names, sizes = _collectives(prof)
    # the local matmuls, on plain tensors: DTensor's own (global shapes) run them inside
    # its dispatch (a `PythonSubclass` range)
    flops = sum(
        e.flops
        for e in prof.events()
        if e.name in MATMULS and not any(c.name == "PythonSubclass" for c in e.cpu_children)
    )
    return MuonStep(peak, left, names, float(flops), sizes)


def _worker(rank: int, world: int, port: int, out: str, jobs: list) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        got = [_record(tuple(map(tuple, shapes)), dtype) for shapes, dtype in jobs]
        if rank == 0:
            Path(out, "rank0.json").write_text(json.dumps([g.__dict__ for g in got]))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def record_muon_steps(jobs: list[tuple[Shapes, str]], world: int) -> list[MuonStep]:
    """Rank 0's recorded Muon step of each job's (weights' [out, in] shapes, dtype) on
    `world` gloo ranks, all of a job's weights in one `fully_shard` group and one
    torch.optim.Muon, forked once for them all."""
    with tempfile.TemporaryDirectory(prefix="tiersim-muon-") as out:
        args = (world, free_port(), out, jobs)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
        got = json.loads(Path(out, "rank0.json").read_text())
    return [MuonStep(**g) for g in got]
