"""Selective recompute of Megatron's layer under a fused attention kernel (flash / cuDNN):
Megatron-Core checkpoints the whole core attention, so the kernel's fp32 log-sum-exp is
recomputed, not kept, in bf16 training as under FP8; Megatron-DeepSpeed runs FlashAttention
outside its checkpoint and keeps it (state/activation_policy.py cites both sources).

The layer, by hand: GPT-like (layernorm, 4h MLP, multi-head), h = 512, a = 8, f = 2048,
s = 2048, b = 1, 2-byte values, Megatron-LM's dropout 0.1, flash attention.
s·b·h = 1,048,576; a value a token of h is 2 B:
  not split under tensor parallelism (sequence parallelism splits them): the two norms'
  inputs, the QKV projection's input, the MLP's input and the two 1-byte dropout masks
  (2·sbh), 5 x 2·sbh = 10,485,760;
  split: q 2·sbh, k and v 4·sbh, the out-projection's input 2·sbh, the MLP's wide tensors
  2·s·b·f x 2 = 16,777,216 and the log-sum-exp 4·a·s·b = 4 x 8 x 2048 x 1 = 65,536:
  2,097,152 + 4,194,304 + 2,097,152 + 16,777,216 + 65,536 = 25,231,360.
No recompute: 10,485,760 + 25,231,360 = 35,717,120 (Korthikanti's 34·sbh = 35,651,584, the
s² terms a fused kernel does not keep replaced by its 65,536 B of statistics).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from engine_helpers import merge, scenario

from tiersim.state.activation_policy import kept
from tiersim.state.activations import Accounting, megatron_layer
from tiersim.state.inventory import build_inventory, layer_activation_bytes
from tiersim.state.resolved import resolve
from tiersim.state.transformer_shape import TransformerShape

ROOT = Path(__file__).resolve().parents[1]
LSE = "logsumexp (fp32)"
NONE = 35_717_120  # the module docstring's sum
LSE_BYTES = 4 * 8 * 2048 * 1  # 4·a·s·b = 65,536

BASE = {
    "name": "lse",
    "model": {
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 2048,
    },
    "training": {
        "implementation": "megatron",
        "attention_kernel": "flash",
        "seq_len": 2048,
        "recompute": "selective",
    },
    "hardware": {"preset": "dgx-h100"},
}


def layer_bytes(parallel: dict | None = None, **training) -> float:
    raw = merge(BASE, {"training": training, "parallel": parallel or {}})
    r = resolve(scenario(raw))
    return layer_activation_bytes(r, r.model)


def test_the_layer_without_recompute_keeps_the_log_sum_exp():
    assert layer_bytes(recompute="none") == NONE
    assert NONE == 34 * 1_048_576 + LSE_BYTES


def test_megatron_core_selective_recompute_drops_the_log_sum_exp():
    # 35,717,120 - 65,536 = 35,651,584 = 34·sbh: nothing of the core but q, k, v (the
    # checkpoint's inputs) and the out-projection's input (the bf16 linear's own)
    assert layer_bytes() == NONE - LSE_BYTES == 34 * 1_048_576
    assert layer_bytes(framework="megatron") == 34 * 1_048_576
    # core_attn named (Megatron-Core's default module) is the same checkpoint
    assert layer_bytes(recompute_modules=["core_attn"]) == 34 * 1_048_576


def test_modules_without_core_attn_keep_the_log_sum_exp():
    # mlp: 35,717,120 - 16,777,216 (the wide tensors) - 2,097,152 (fc1's fused norm output,
    # the MLP input, under Megatron-Core's TE spec) = 16,842,752, the statistics kept
    assert layer_bytes(recompute_modules=["mlp"]) == 16_842_752
    # layernorm: a dense TE layer has no norm of its own to rerun: 35,717,120 kept
    assert layer_bytes(recompute_modules=["layernorm"]) == 35_717_120


def test_tensor_parallelism_divides_the_log_sum_exp_as_a_split_item():
    # tensor 4: 10,485,760 + 25,231,360 / 4 = 16,793,600; the statistics a GPU keeps are
    # 65,536 / 4 = 16,384 = 4 x (8 / 4 heads) x 2048, dropped under selective: 16,777,216
    assert layer_bytes({"tensor": 4}, recompute="none") == 16_793_600
    assert layer_bytes({"tensor": 4}) == 16_793_600 - 16_384 == 16_777_216
    # sequence parallel too: everything / 4: 8,929,280 and 8,929,280 - 16,384 = 8,912,896
    assert layer_bytes({"tensor": 4, "sequence": True}, recompute="none") == 8_929_280
    assert layer_bytes({"tensor": 4, "sequence": True}) == 8_912_896


def test_megatron_deepspeed_runs_flash_outside_the_checkpoint():
    # Megatron-DeepSpeed checkpoints its classic attention only: flash keeps its statistics
    assert layer_bytes(framework="deepspeed") == NONE
    # its classic (eager) attention is checkpointed: the s² terms go, 34·sbh
    assert layer_bytes(framework="deepspeed", attention_kernel="eager") == 34 * 1_048_576


def test_under_fp8_the_core_output_goes_with_the_statistics_where_the_core_is_checkpointed():
    """TE's FP8 linears (state/activations_fp8.py): the QKV and MLP inputs 1 B a value
    (1,048,576 each), the MLP's wide tensors 3 B over 2·s·b·f (12,582,912), the
    out-projection's bf16 input 2,097,152 and its FP8 copy 1,048,576; the rest as above
    (norms' inputs 4,194,304, q 2,097,152, k and v 4,194,304, masks 2,097,152, statistics
    65,536): 30,474,240 B without recompute. Megatron-Core's selective drops the bf16 output
    and the statistics: 30,474,240 - 2,097,152 - 65,536 = 28,311,552 = 27·sbh;
    Megatron-DeepSpeed's flash runs outside its checkpoint and keeps both."""
    fp8 = {"recipe": "delayed"}
    assert layer_bytes(recompute="none", fp8=fp8) == 30_474_240
    assert layer_bytes(fp8=fp8) == 28_311_552 == 27 * 1_048_576
    assert layer_bytes(fp8=fp8, framework="deepspeed") == 30_474_240


def test_the_policy_on_the_layers_items():
    m = TransformerShape(
        **{"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 8, "head_dim": 64},
        **{"ffn_hidden": 2048, "vocab": 1000, "max_positions": 2048, "gated_mlp": False},
        **{"tied_embeddings": True, "qkv_bias": True, "attn_out_bias": True, "mlp_bias": True},
        norm="layernorm",
        position="learned",
    )
    items = megatron_layer(m, 2048, 1, Accounting(kernel="flash"))
    lse = [i for i in items if i.name == LSE]
    assert [(i.nbytes, i.split) for i in lse] == [(LSE_BYTES, True)]
    assert LSE not in [i.name for i in kept(items, "selective")]
    assert LSE in [i.name for i in kept(items, "selective", core_checkpointed=False)]
    assert LSE in [i.name for i in kept(items, "selective", ("mlp",))]
    assert [i.name for i in kept(items, "none")] == [i.name for i in items]


def test_the_405b_long_context_scenario_drops_the_statistics_per_gpu():
    """scenarios/llama3-405b-128k-cp16.yaml (no framework: Megatron-Core's checkpoint), by
    hand: each GPU's share of a layer's statistics is 4 x (128 heads / tensor 8) x (131,072 /
    context 16 tokens) x 1 sequence = 4 x 16 x 8,192 = 524,288 B. The inventory's stage is
    stage 1 (8 layers) of 16, which holds 16 - 1 = 15 micro-batches in flight under 1F1B:
    8 x 15 x 524,288 = 62,914,560 B fewer under selective than without recompute (flash has
    no s² terms, so that is the whole difference)."""
    raw = yaml.safe_load((ROOT / "scenarios/llama3-405b-128k-cp16.yaml").read_text())
    selective = build_inventory(resolve(scenario(raw)))
    raw["training"]["recompute"] = "none"
    none = build_inventory(resolve(scenario(raw)))
    assert selective.stage == none.stage == 1
    drop = none.per_gpu["activations"] - selective.per_gpu["activations"]
    assert drop == 8 * 15 * 4 * 16 * 8_192 == 62_914_560
