"""Ground truth for Muon's step on FSDP2's sharded parameters: torch.optim.Muon (torch 2.13)
stepping one weight under `fully_shard` (a DTensor sharded on its rows) on W gloo CPU ranks,
its allocations recorded with the profiler's memory events as the step's ground truth records
a whole step (step_timeline.py), the collectives DTensor runs for it counted by name, and the
FLOPs of its matrix multiplications on the rank (the profiler's, of the local matmuls).
Compared with state/muon_sharded.py by tests/test_muon_sharded.py.

DTensor's collectives are functional collectives (`_c10d_functional`), which gloo runs on a
worker thread of its own: the worker drops its reference to a finished collective's tensors
microseconds after `wait_tensor` returns, and a tensor it drops last is freed there, unseen by
the profiler (which records the recording thread's allocations), and counted as never freed.
`settled_collectives` gives the worker that time after each wait, while the caller still holds
the tensor, so that every free happens, and is seen, on the recording thread.

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch._dynamo  # FSDP2 imports it lazily in every rank otherwise
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor
from torch.profiler import ProfilerActivity, profile

from tiersim.groundtruth.fsdp2 import free_port

WORKER_LETS_GO_S = 0.002  # the worker drops a collective's tensors within microseconds
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MATMULS = ("aten::mm", "aten::addmm")


@contextlib.contextmanager
def settled_collectives() -> Iterator[None]:
    """Each functional collective's wait returns once gloo's worker has let go of its tensors."""
    wait = funcol.wait_tensor

    def settled(tensor: torch.Tensor) -> torch.Tensor:
        out = wait(tensor)
        time.sleep(WORKER_LETS_GO_S)
        return out

    funcol.wait_tensor = settled
    try:
        yield
    finally:
        funcol.wait_tensor = wait


@dataclass(frozen=True)
class MuonStep:
    """Rank 0's recorded Muon step of one rows x cols weight."""

    peak_bytes: int  # the most its transients held at once (beyond weights, grads, state)
    left_bytes: int  # what it left allocated (0: every free seen)
    collectives: dict[str, int]  # gloo's collectives by name (all_gather, all_reduce)
    matmul_flops: float  # the profiler's FLOPs of the local matmuls


def _record(rows: int, cols: int, dtype: str) -> MuonStep:
    torch.manual_seed(0)
    layer = torch.nn.Linear(cols, rows, bias=False).to(DTYPES[dtype])
    fully_shard(layer)
    weight = layer.weight
    grad = torch.randn(rows, cols, dtype=DTYPES[dtype])
    weight.grad = distribute_tensor(grad, weight.device_mesh, weight.placements)
    optimizer = torch.optim.Muon([weight], lr=1e-3)
    optimizer.step()  # warm-up: the momentum buffer exists
    with (
        settled_collectives(),
        profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_flops=True,
        ) as prof,
    ):
        optimizer.step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    collectives: dict[str, int] = {}
    for e in prof.events():
        if e.name.startswith("gloo:"):
            collectives[e.name[5:]] = collectives.get(e.name[5:], 0) + 1
    # the local matmuls, on plain tensors: DTensor's own (global shapes) run them inside
    # its dispatch (a `PythonSubclass` range)
    flops = sum(
        e.flops
        for e in prof.events()
        if e.name in MATMULS and not any(c.name == "PythonSubclass" for c in e.cpu_children)
    )
    return MuonStep(peak, current, collectives, float(flops))


def _worker(rank: int, world: int, port: int, out: str, jobs: list) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        got = [_record(*job).__dict__ for job in jobs]
        if rank == 0:
            Path(out, "rank0.json").write_text(json.dumps(got))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def record_muon_steps(jobs: list[tuple[int, int, str]], world: int) -> list[MuonStep]:
    """Rank 0's recorded Muon step of each (rows, cols, dtype) weight on `world` gloo ranks,
    forked once for them all."""
    with tempfile.TemporaryDirectory(prefix="tiersim-muon-") as out:
        args = (world, free_port(), out, jobs)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
        got = json.loads(Path(out, "rank0.json").read_text())
    return [MuonStep(**g) for g in got]
