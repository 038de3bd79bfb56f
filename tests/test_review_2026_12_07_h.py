"""Findings of the eighth 2026-12-07 review, the H200 + HBF buyer's for Llama-3-70B and a
DeepSeek-style MoE (docs/review-2026-12-07-h.md), one test each; expected values by hand."""

from __future__ import annotations

import json

from tiersim.cli import main

# A small DeepSeek-style MoE by its dimensions, every count by hand below: 2 layers of width
# 256 (4 heads, plain attention q, k, v, o: 4 x 256 x 256 = 262,144), two RMSNorms (512), a
# router 256 x 4 = 1,024 and 4 routed SwiGLU experts of width 128 (4 x 3 x 256 x 128 =
# 393,216); an untied 1,000 x 256 embedding and head (256,000 each) and a final norm (256).
MOE = (
    "name: m\n"
    "model: {layers: 2, hidden: 256, heads: 4, ffn_hidden: 512, vocab: 1000, gated_mlp: true,"
    " norm: rmsnorm, position: rope, experts: 4, experts_per_token: 2, expert_ffn_hidden: 128}\n"
    "training: {seq_len: 256, optimizer: adamw}\n"
    "parallel: {data: 4, expert: 2, zero_stage: 1}\n"
    "hardware: {preset: h200-hbf}\n"
    "checkpoint: {every_steps: 10, target: nvme, mode: blocking}\n"
)
DENSE_PARAMS = 2 * (262_144 + 512 + 1_024) + 2 * 256_000 + 256  # 1,039,616
EXPERT_PARAMS = 2 * 393_216  # 786,432


def test_a_checkpoint_writes_each_routed_experts_weights_once_over_their_replicas(tmp_path):
    """Finding 1: a checkpoint divided every replicated class over the whole data-parallel
    group, the routed experts' weights too; but under expert parallelism 2 of data 4 each
    expert's weights live on 2 ranks (the expert-data group), not 4: the per-GPU checkpoint
    left half of them out (DeepSeek-V2-Lite-like, EP 8 of data 16: 7/8, 12.17 GB of the
    13.74 GB a GPU)."""
    path = tmp_path / "m.yaml"
    path.write_text(MOE)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["model"]["parameters"] == DENSE_PARAMS + EXPERT_PARAMS == 1_826_048
    # per GPU, ZeRO 1 (master and moments sharded; bf16 weights replicated):
    held_experts = EXPERT_PARAMS // 2  # 2 of the 4 experts a GPU: 393,216 parameters
    weights = DENSE_PARAMS * 2 // 4 + held_experts * 2 // 2  # 519,808 + 393,216
    master = DENSE_PARAMS * 4 // 4 + held_experts * 4 // 2  # 1,039,616 + 786,432
    moments = DENSE_PARAMS * 8 // 4 + held_experts * 8 // 2  # 2,079,232 + 1,572,864
    assert weights + master + moments == 6_391_168
    # every byte of the model's checkpoint once over the 4 GPUs: 14 B x 1,826,048 / 4
    assert 14 * 1_826_048 // 4 == 6_391_168
    assert rep["checkpoint"]["bytes"] == 6_391_168  # was 6,194,560: expert weights / 4
