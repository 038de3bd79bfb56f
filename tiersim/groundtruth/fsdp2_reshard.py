"""FSDP2's `reshard_after_forward` measured: on N CPU processes (gloo on 127.0.0.1), fully_shard
on every layer and the root with reshard_after_forward as given, one micro-batch's forward,
backward and optimizer step, counting FSDP2's all-gathers in the forward and in the backward
and each layer's parameters whole (unsharded) at the step's start, after the forward, after
the backward and after the optimizer step. tiersim's rule (docs/fsdp-reshard.md): False keeps
each layer whole from its forward's all-gather to its backward, none gathered in backward.

Run by hand (`python -m tiersim.groundtruth.fsdp2_reshard`): it forks N ranks, too slow a
test. Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # FSDP2 imports it lazily in every rank otherwise
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives

from tiersim.groundtruth.fsdp2 import free_port
from tiersim.groundtruth.torchmodels import Decoder
from tiersim.state.model import Transformer

TINY = {
    **dict(hidden=64, layers=4, heads=4, kv_heads=4, head_dim=16, ffn_hidden=128, vocab=1000),
    **dict(max_positions=16, gated_mlp=True, tied_embeddings=False, qkv_bias=False),
    **dict(attn_out_bias=False, mlp_bias=False, norm="rmsnorm", position="rope"),
}


def _whole(layers) -> int:
    """Layers whose registered parameters are plain tensors (unsharded), not DTensors."""
    return sum(not any(hasattr(p, "to_local") for p in layer.parameters()) for layer in layers)


def _worker(rank: int, world: int, port: int, job: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        phase, gathers = ["forward"], {"forward": 0, "backward": 0}
        call = collectives.DefaultAllGather.__call__

        def counted(self, *args, **kwargs):
            gathers[phase[0]] += 1
            return call(self, *args, **kwargs)

        collectives.DefaultAllGather.__call__ = counted
        model = Transformer(**job["model"])
        torch.manual_seed(0)
        net = Decoder(model, job["seq_len"])
        for layer in net.layers:
            fully_shard(layer, reshard_after_forward=job["reshard"])
        fully_shard(net, reshard_after_forward=job["reshard"])
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        ids = torch.randint(0, model.vocab, (1, job["seq_len"]))
        whole = {"start": _whole(net.layers)}
        loss = net(ids, ids)
        whole["after forward"] = _whole(net.layers)
        phase[0] = "backward"
        loss.backward()
        whole["after backward"] = _whole(net.layers)
        optimizer.step()
        whole["after optimizer step"] = _whole(net.layers)
        got = {"all_gathers": gathers, "layers_whole": whole, "layers": model.layers}
        Path(job["out"], f"rank{rank}.json").write_text(json.dumps(got))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def measure(world: int = 2, reshard: bool = False, seq_len: int = 16) -> dict:
    """Rank 0's counts (every rank's are the same)."""
    with tempfile.TemporaryDirectory(prefix="tiersim-reshard-") as out:
        job = {"model": TINY, "seq_len": seq_len, "reshard": reshard, "out": out}
        args = (world, free_port(), job)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="fork")
        return json.loads(Path(out, "rank0.json").read_text())


if __name__ == "__main__":
    for flag in (True, False):
        print(f"reshard_after_forward={flag}:", json.dumps(measure(reshard=flag)), file=sys.stdout)
