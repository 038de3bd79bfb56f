"""`tiersim measure --fsdp N`: FSDP2 (fully_shard on every layer and the root) on N CPU processes
(gloo on 127.0.0.1), one AdamW step on tiersim's own modules, each rank's shard bytes of
weights, gradients and optimizer state against tiersim.state.fsdp's prediction.

Each rank writes what it holds to a JSON file in a temporary folder; nothing else is shared.
Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # FSDP2 imports it lazily in every rank otherwise (seconds apiece)
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard  # imported once, before the ranks fork

from tiersim.groundtruth.ports import (
    free_port,
)  # also fsdp2_step's, muon_dtensor's, fsdp2_reshard's
from tiersim.groundtruth.torchmodels import Decoder
from tiersim.state.fsdp import rank_bytes
from tiersim.state.model import Transformer

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MAX_RANKS = 16  # processes on one host; each imports torch and holds its shard


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _stored(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (padding included)."""
    return sum(
        {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values()
    )


def _held(net: torch.nn.Module, optimizer: torch.optim.Optimizer, grads: list) -> dict[str, int]:
    params = [_local(p) for p in net.parameters()]
    state = [_local(v) for st in optimizer.state.values() for k, v in st.items() if k != "step"]
    steps = [_local(st["step"]) for st in optimizer.state.values() if "step" in st]
    return {
        "weights_local": _nbytes(params),
        "weights_stored": _stored(params),
        "gradients": _stored(grads),
        "optimizer": _nbytes(state),
        "step_counters": _nbytes(steps),
    }


def _worker(rank: int, world: int, port: int, job: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        model = Transformer(**job["model"])
        torch.manual_seed(0)
        net = Decoder(model, job["seq_len"]).to(DTYPES[job["dtype"]])
        for layer in net.layers:
            fully_shard(layer)
        fully_shard(net)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        ids = torch.randint(0, model.vocab, (job["micro_batch_size"], job["seq_len"]))
        net(ids, ids).backward()
        grads = [_local(p.grad) for p in net.parameters() if p.grad is not None]
        optimizer.step()
        held = _held(net, optimizer, grads)
        Path(job["out"], f"rank{rank}.json").write_text(json.dumps(held))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def measure_fsdp(m: Transformer, world: int, dtype: str, seq_len: int, batch: int) -> dict:
    """Every rank's measured and predicted bytes: {'ranks': [{rank, measured, predicted}]}."""
    with tempfile.TemporaryDirectory(prefix="tiersim-fsdp2-") as out:
        job = {
            "model": m.__dict__,
            "dtype": dtype,
            "seq_len": seq_len,
            "micro_batch_size": batch,
            "out": out,
        }
        # fork: the ranks start with torch imported (spawn re-imports it in each, seconds apiece)
        args = (world, free_port(), job)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
        measured = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    value_bytes = torch.finfo(DTYPES[dtype]).bits // 8
    return {
        "world_size": world,
        "ranks": [
            {
                "rank": r,
                "measured": measured[r],
                "predicted": rank_bytes(m, world, r, value_bytes).as_dict(),
            }
            for r in range(world)
        ],
    }
