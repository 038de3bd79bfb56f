"""FSDP2 (fully_shard) shards, measured here on 2 and 4 CPU ranks (gloo, 127.0.0.1), against
tiersim.state.fsdp and the inventory under `training.framework: fsdp`, to the byte.

The model: Llama-style, h = 64, 4 heads, 2 kv heads, f = 99, V = 101, 2 layers, fp32: its
first dimensions (101, 99, 64, 32) do not divide by 4, so trailing ranks hold fewer rows and the
padding shows. The ranks fork from this process (torch and FSDP imported once).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
import torch
import torch._dynamo  # imported once here, not in every forked rank
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import scenario
from torch.distributed.fsdp import fully_shard

from tiersim.groundtruth.ports import reserved_port
from tiersim.groundtruth.torchmodels import Decoder
from tiersim.state.fsdp import rank_bytes
from tiersim.state.inventory import build_inventory
from tiersim.state.model import Transformer
from tiersim.state.resolved import resolve

DIMS = {
    "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 99, "vocab": 101,
    "gated_mlp": True, "norm": "rmsnorm", "position": "rope",
}  # fmt: skip
MODEL = Transformer(
    layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=99, vocab=101,
    max_positions=None, gated_mlp=True, tied_embeddings=False, qkv_bias=False,
    attn_out_bias=False, mlp_bias=False, norm="rmsnorm", position="rope",
)  # fmt: skip


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    torch.manual_seed(0)
    net = Decoder(MODEL, 16)
    for layer in net.layers:
        fully_shard(layer)
    fully_shard(net)
    params = [_local(p) for p in net.parameters()]
    held = {
        "weights_local": sum(p.numel() * p.element_size() for p in params),
        "weights_stored": sum(p.untyped_storage().nbytes() for p in params),
    }
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    ids = torch.randint(0, 101, (1, 16))
    net(ids, ids).backward()
    grads = {}
    for p in net.parameters():
        g = _local(p.grad)
        grads[g.untyped_storage().data_ptr()] = g.untyped_storage().nbytes()
    opt.step()
    states = [(k, _local(v)) for st in opt.state.values() for k, v in st.items()]
    held["gradients"] = sum(grads.values())
    held["optimizer"] = sum(v.numel() * v.element_size() for k, v in states if k != "step")
    held["step_counters"] = sum(v.numel() * v.element_size() for k, v in states if k == "step")
    Path(out, f"{rank}.json").write_text(json.dumps(held))
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(world: int, tmp_path: Path) -> list[dict]:
    with reserved_port() as port:  # kept from other processes until rank 0 has bound it
        mp.start_processes(
            _worker, args=(world, port, str(tmp_path)), nprocs=world, start_method="fork"
        )
    return [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_holds_what_tiersim_predicts(world, tmp_path):
    measured = run_ranks(world, tmp_path)
    for rank, held in enumerate(measured):
        assert held == rank_bytes(MODEL, world, rank, 4).as_dict(), rank
    if world == 4:  # the trailing rank holds fewer rows but the same padded storage
        assert measured[3]["weights_local"] < measured[0]["weights_local"]
        assert measured[3]["weights_stored"] == measured[0]["weights_stored"]
    raw = {
        "name": "f",
        "model": DIMS,
        "training": {
            "seq_len": 16,
            "framework": "fsdp",
            "precision": {"weights": "fp32", "gradients": "fp32", "master": "none"},
        },
        "parallel": {"data": world, "zero_stage": 3},
    }
    per_gpu = build_inventory(resolve(scenario(raw))).per_gpu
    assert per_gpu["weights"] == measured[0]["weights_stored"]
    assert per_gpu["gradients"] == measured[0]["gradients"]
    assert per_gpu["optimizer"] == measured[0]["optimizer"]


def test_measure_fsdp_cli_compares_every_rank(capsys):
    """`tiersim measure --fsdp 2 --format json`: tiersim's own measurement of the same run
    equals the prediction on every rank."""
    from tiersim.cli import main

    sets = [a for k, v in DIMS.items() for a in ("--set", f"model.{k}={v}")]
    args = ["measure", "--model", "llama-2-7b", *sets, "--set", "model.head_dim=null"]
    assert (
        main([*args, "--seq-len", "16", "--dtype", "fp32", "--fsdp", "2", "--format", "json"]) == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert [r["measured"] == r["predicted"] for r in got["ranks"]] == [True, True]


def test_fsdp_needs_adam(capsys):
    from tiersim.cli import main

    assert main(["measure", "--model", "gpt2", "--optimizer", "sgd", "--fsdp", "2"]) == 2
    assert "adamw or adam" in capsys.readouterr().err


def test_the_step_homes_each_unit_padded_as_fsdp2_does():
    """Under framework fsdp the step's units hold FSDP2's padded shards too: 2 layers and the
    rest add up to the inventory's rank-0 bytes (4 ranks, fp32)."""
    from tiersim.workload.work import build_workload

    raw = {
        "name": "f",
        "model": DIMS,
        "training": {
            "seq_len": 16,
            "framework": "fsdp",
            "precision": {"weights": "fp32", "gradients": "fp32", "master": "none"},
        },
        "parallel": {"data": 4, "zero_stage": 3},
    }
    s = scenario(raw)
    units = build_workload(resolve(s)).units
    assert sum(u.homed["weights"] for u in units) == rank_bytes(MODEL, 4, 0, 4).weights_stored
    assert sum(u.homed["weights"] for u in units) == build_inventory(resolve(s)).per_gpu["weights"]
