"""ZeRO++ hpZ's secondary partition of each DeepSpeed fetch part, tensor by tensor (issue 38,
review o's row 11): a part holds its own tensors' secondary, each tensor padded on its own to
a multiple of the data-parallel size (partition_parameters.py `_aligned_size` //
`num_ranks_in_param_group`), not a share of its layer's by parameters."""

from __future__ import annotations

from engine_helpers import merge, scenario

from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

# A GPT-2-shaped model small enough that its tensors do not divide by 16: hidden 90 (3 heads of
# 30), MLP 360, every bias on, two layers. Under framework deepspeed a layer is listed as
# Megatron-DeepSpeed holds it (state/held_layout.py): query_key_value 270 x 90 and its bias 270,
# dense (o) 90 x 90 and its bias 90, dense_h_to_4h 360 x 90, dense_4h_to_h 90 x 360, their
# biases 360 and 90, the two layer norms' weights and biases 4 x 90: 98,370 values.
MODEL = {
    "family": "gpt2",
    "hidden": 90,
    "heads": 3,
    "ffn_hidden": 360,
    "vocab": 1000,
    "layers": 2,
    "max_positions": 64,
    "norm": "layernorm",
    "position": "learned",
    "gated_mlp": False,
    "qkv_bias": True,
    "attn_out_bias": True,
    "mlp_bias": True,
}


def _raw() -> dict:
    return {
        "name": "hpz-split",
        "model": MODEL,
        "training": {
            "framework": "deepspeed",
            "micro_batch_size": 4,
            "grad_accumulation": 2,
            "seq_len": 64,
            "optimizer": "adamw",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
            "deepspeed": {
                "zero_hpz_partition_size": 8,
                # 8,100-value matrices persistent, 32,400-value ones not
                "stage3_param_persistence_threshold": 10_000,
            },
            "offload": {"prefetch_bucket_size": 30_000},
        },
        "parallel": {"data": 16, "zero_stage": 3},
        "placement": {"weights": "dram"},
        "hardware": {"preset": "dgx-h100"},
    }


def _secondary_bytes(n: int) -> int:
    # a tensor of n values, d = 16, h = 8, bf16: ceil(n / 16) x 16 / 8 values x 2 B
    return -(-n // 16) * 16 // 8 * 2


def test_each_fetch_part_holds_its_own_tensors_secondary_bytes():
    # Submodules (each matrix with the vectors after it): query_key_value with its bias
    # 24,300 + 270 = 24,570; o with its bias 8,100 + 90 = 8,190; fc 32,400; proj with fc's and
    # proj's biases and the norms 32,400 + 360 + 90 + 4 x 90 = 33,210. Bucketed at 30,000: each
    # its own part.
    # Secondary, d = 16, h = 8, 2 B:
    #   24,300 -> ceil(1,518.75) = 1,519 x 16 / 8 = 3,038 values = 6,076 B
    #   8,100 -> ceil(506.25) = 507 x 16 / 8 = 1,014 values = 2,028 B (not 8,100 / 8 x 2 = 2,025)
    #   32,400 -> 2,025 x 16 / 8 = 4,050 values = 8,100 B
    #   270 -> 17 x 16 / 8 = 34 values = 68 B;  90 -> 6 x 16 / 8 = 12 values = 24 B;
    #   360 -> 23 x 16 / 8 = 46 values = 92 B
    # Parts: [qkv + bias] 6,076 + 68 = 6,144, persistent 68 (24,300 > 10,000: the matrix not);
    #        [o + bias] 2,028 + 24 = 2,052, all persistent (8,100 <= 10,000);
    #        [fc] 8,100, none persistent;
    #        [proj + vectors] 8,100 + 92 + 24 + 4 x 24 = 8,312, of which persistent 212.
    # The layer: 6,144 + 2,052 + 8,100 + 8,312 = 24,608 B, persistent 2,332. By parameters
    # (the released 22,276 and the persistent 2,332 each by cumulative floors at 0, 24,570,
    # 32,760, 65,160, 98,370) the first part had 22,276 x 24,570 // 98,370 = 5,563 + 2,332 x
    # 24,570 // 98,370 = 582: 6,145 B, and the fc part, which holds no persistent tensor,
    # 2,332 x 65,160 // 98,370 - 2,332 x 32,760 // 98,370 = 1,544 - 776 = 768 persistent bytes.
    # The rest (wte and the head 1,000 x 90 -> 11,250 values each, wpe 64 x 90 -> 720, ln_f
    # 2 x 12): 2 x 22,500 + 1,440 + 48 = 46,488 B; the model 2 x 24,608 + 46,488 = 95,704 B.
    assert _secondary_bytes(8_100) == 2_028 and _secondary_bytes(32_400) == 8_100
    assert _secondary_bytes(90) == 24 and _secondary_bytes(360) == 92
    assert _secondary_bytes(24_300) == 6_076 and _secondary_bytes(270) == 68
    units = build_workload(resolve(scenario(merge(_raw(), {})))).units
    for layer in ("L0", "L1"):
        parts = [u for u in units if u.name.startswith(layer + ".")]
        assert [u.params for u in parts] == [24_570, 8_190, 32_400, 33_210]
        assert [u.hpz_secondary for u in parts] == [6_144, 2_052, 8_100, 8_312]
        assert [u.hpz_persistent for u in parts] == [68, 2_052, 0, 212]
        assert sum(u.hpz_secondary for u in parts) == 24_608
        assert sum(u.hpz_persistent for u in parts) == 2_332
    assert sum(u.hpz_secondary for u in units) == 95_704
