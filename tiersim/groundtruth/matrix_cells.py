"""Issue 38's matrix of whole training steps under FSDP2 on the CPU: dense, grouped-query and
shared-expert MoE models x recompute none / selective / full x fp32 / bf16 x AdamW / 8-bit
AdamW / Muon, each on 1, 2 and 4 gloo ranks (162 cells), as scenarios: what the ground truth
builds and steps (groundtruth/fsdp2_matrix.py, tests/test_fsdp2_step.py) and what tiersim
predicts for it (groundtruth/step_timeline.py). Tiny models: a step takes a tenth of a second.

Nothing here imports PyTorch.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tiersim.config.load import build
from tiersim.config.schema import Scenario

# two shapes: the dense one's peak is the loss's backward, or with full recompute in fp32 a
# layer's; the grouped-query one's a layer's backward (MLP 512 wide, vocabulary 128)
DENSE = {"hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 128, "vocab": 512}
GQA = {"hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 128}
LLAMA = {"layers": 2, "norm": "rmsnorm", "position": "rope", "gated_mlp": True}
# Qwen2-MoE (transformers 5's Qwen2MoeForCausalLM, as tests/test_step_measure.py): 4 routed
# experts (2 a token) of width 96, fused into two 3-D tensors, one gated shared expert of 160
QWEN2_MOE = {**LLAMA, **GQA, "hidden": 64, "ffn_hidden": 128, "vocab": 256, "experts": 4}
QWEN2_MOE |= {"experts_per_token": 2, "expert_ffn_hidden": 96, "shared_experts": 1}
QWEN2_MOE |= {"shared_expert_ffn_hidden": 160, "shared_expert_gate": True, "qkv_bias": True}
SHAPES = {"dense": DENSE, "gqa": GQA, "moe": QWEN2_MOE}

# selective recompute checkpoints the attention core (groundtruth/selective.py); Muon is
# torch.optim.Muon on the layers' matrices, AdamW on the rest; 8-bit AdamW is torchao's
# (state/optimizers.py)
RECOMPUTE = ("none", "selective", "full")
DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("adamw", "adamw8bit", "muon")
WORLDS = (1, 2, 4)

Cell = tuple[str, str, str, str]  # model, recompute, dtype, optimizer
CELLS: list[Cell] = list(itertools.product(SHAPES, RECOMPUTE, DTYPES, OPTIMIZERS))


def fsdp_raw(shape: dict, recompute: str, dtype: str, world: int) -> dict[str, Any]:
    """A Llama-style model of `shape` under FSDP2 on `world` ranks, AdamW, 128 tokens, no
    workspace (the CPU has none to count)."""
    precision = {k: dtype for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {
        "seq_len": 128,
        "precision": precision,
        "workspace": "0 B",
        "optimizer": "adamw",
        "implementation": "huggingface",
        "attention_kernel": "sdpa",
        "recompute": recompute,
        "framework": "fsdp",
    }
    model = {**LLAMA, **shape, "tied_embeddings": False, "max_positions": 256}
    parallel = {"data": world, "zero_stage": 3}
    return {"name": "fsdp2", "model": model, "training": training, "parallel": parallel}


def matrix_raw(name: str, recompute: str, dtype: str, optimizer: str, world: int) -> dict:
    """The cell's scenario mapping (the MoE model on 64 tokens)."""
    raw = fsdp_raw(SHAPES[name], recompute, dtype, world)
    raw["training"]["optimizer"] = optimizer
    if name == "moe":
        raw["model"] = {**QWEN2_MOE, "tied_embeddings": False, "max_positions": 256}
        raw["training"]["seq_len"] = 64
    return raw


def cell_scenario(cell: Cell, world: int) -> Scenario:
    """The cell's scenario, validated as the loader validates a user's."""
    return build(matrix_raw(*cell, world), Path.cwd(), "-".join(cell)).scenario


def cell_name(cell: Cell, world: int) -> str:
    return f"{world}ranks-" + "-".join(cell)
