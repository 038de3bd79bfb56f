"""Review 2026-12-07 (k): an ML engineer with 16 H100s (two nodes) deciding whether Llama-3-70B
and a Qwen2-MoE-like model train on them, with what layout and offload
(docs/review-2026-12-07-k.md). Each test fails on the tree before its fix; expected values are
worked by hand in each."""

import json

from tiersim.core.units import fmt_time


def test_a_large_plans_sample_line_says_when_nothing_is_left_to_simulate():
    """`plan` over the default space of a TP 8 x DP 2 Llama-3-70B under framework megatron:
    21 of 69,984 candidates fit, the 21 of the best bounds were simulated and left none that
    could rank. The line went on '0 spread over those took 0 s each: the other 0 on 1 worker
    (of 2 asked: no more than the candidates left), about 0 s'."""
    from tiersim.plan.checking import said_left  # new with the fix: the old tree fails here

    said = said_left(0, 0, 0.0, (0, "1 worker (of 2 asked: no more than the candidates left)", 0))
    assert said == (
        " and leave none that could still rank (the others cannot, by their bounds): "
        "nothing more to simulate"
    )
    # 5 left, all 5 of them spread over and timed (3 s / 5 = 600 ms each): none to estimate
    said = said_left(5, 5, 3.0 / 5, (0, "1 worker", 0.0))
    assert said.endswith("; 5 spread over those took 600.00 ms each: none left to simulate")
    # 1,200 left, 5 timed, the other 1,195 on 2 workers, about 2 min (120 s)
    said = said_left(1200, 5, 0.25, (1195, "2 workers", 120.0))
    assert said.endswith(
        "leave 1,200 that could still rank (the others cannot, by their bounds); 5 spread "
        "over those took 250.00 ms each: the other 1,195 on 2 workers, about 2.0 min"
    )


ZERO3_NVME = {
    "name": "z3",
    # two layers of Llama-3-70B's widths: a 8,192 x 28,672 MLP matrix is one fetch
    "model": {
        "layers": 2,
        "hidden": 8192,
        "heads": 64,
        "kv_heads": 8,
        "ffn_hidden": 28672,
        "vocab": 32000,
        "gated_mlp": True,
        "position": "rope",
        "norm": "rmsnorm",
        "max_positions": 512,
    },
    "training": {"seq_len": 512, "recompute": "full", "framework": "deepspeed"},
    "parallel": {"data": 2, "zero_stage": 3},
    "placement": {
        "gradients": "dram",
        "master": "nvme",
        "optimizer": "nvme",
        "optimizer_compute": "cpu",
    },
    "hardware": {"preset": "dgx-h100"},
}


def test_a_prefetch_depth_cut_below_the_setting_says_so_and_why(cli, write, tmp_path):
    """ZeRO-3 with the state on NVMe under DeepSpeed, `simulation.prefetch_depth` left out:
    Llama-3-70B's line said 'prefetch depth 0 (simulation.prefetch_depth; DeepSpeed's default
    2)', a setting nobody made (and one refused: the key must be above 0). Here DeepSpeed's
    default depth is 2 (config/framework.py, docs/zero3-prefetch.md) and
    stage3_prefetch_bucket_size 0 is DeepSpeed's "no prefetch" (the coordinator gathers ahead
    while fewer than min(max_live - available, 0) = 0 values were taken: none), so the depth
    is cut to 0; a fetch is one MLP module, Megatron-DeepSpeed's dense_h_to_4h [2 x 28,672,
    8,192] = 469,762,048 values (470 M; 235 M a matrix with gate and up apart)."""
    raw = {**ZERO3_NVME, "training": {**ZERO3_NVME["training"]}}
    raw["training"]["deepspeed"] = {"stage3_prefetch_bucket_size": 0}
    code, out, err = cli("run", write(raw), "--out", tmp_path / "o")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("Offload"))
    assert "the largest 470 M parameters a fetch" in line
    assert (
        "; prefetch depth 0 (simulation.prefetch_depth 2, DeepSpeed's default, cut to the "
        "fetches of up to 470 M parameters that fit in the values DeepSpeed keeps gathered "
        "ahead (training.deepspeed.stage3_prefetch_bucket_size, stage3_max_live_parameters: "
        "docs/zero3-prefetch.md) and in the GPU memory left);"
    ) in line
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["sim"]["prefetch_depth"] == 0
    assert report["sim"]["prefetch_depth_configured"] == 2


def test_the_host_peaks_fp32_gradient_part_says_it_is_beyond_the_16_bit_ones(cli_json, write):
    """ZeRO-3 under DeepSpeed, master and moments in DRAM, a CPU optimizer: Llama-3-70B's host
    peak listed 'fp32 gradients (accumulation boundary) 8.82 GB' beside 'resident gradients
    8.82 GB', where a shard of 70,553,706,496 / 16 = 4.41e9 values is 17.64 GB in fp32: the
    part is what the fp32 copy adds to the 16-bit gradients, and now says so. By hand for
    two layers of Llama-3-70B's widths (855,654,400 parameters a layer, as Llama-3-70B's) and
    a 32,000-token vocabulary, untied: 2 x 855,654,400 + 2 x 32,000 x 8,192 + 8,192 (the
    final norm) = 2,235,604,992 parameters, 1,117,802,496 a GPU over data 2: 2,235,604,992 B
    of bf16 gradients, and 4 - 2 B a value more at the boundary, the same 2,235,604,992 B."""
    placement = {**ZERO3_NVME["placement"], "master": "dram", "optimizer": "dram"}
    report = cli_json(write({**ZERO3_NVME, "placement": placement}))
    assert report["model"]["parameters"] == 2_235_604_992
    parts = report["host_memory_timeline"]["peak_parts"]
    assert parts["resident gradients"] == 2_235_604_992
    assert parts["fp32 gradients beyond the 16-bit ones (accumulation boundary)"] == 2_235_604_992
    assert "fp32 gradients (accumulation boundary)" not in parts


def test_the_exposed_cpu_work_is_a_priced_row_of_its_own(cli, write, tmp_path):
    """ZeRO-3 under DeepSpeed with a CPU optimizer: the 'model's prices' table put the CPU
    update's exposed time into 'waits, gradient-path kernels (not priced)' (Llama-3-70B over
    16 GPUs: 12.560 s of 45.380 s, 6.443 s of it the CPU update the model prices). By hand
    for the two-layer model, 1,117,802,496 parameters a GPU (data 2) on dgx-h100: the CPU-Adam
    kernel at 0.794 Gparam/s 1.407811 s, clipping 8 B and the copy back 4 + 2 B a parameter
    over 76.8 GB/s 0.203766 s, 15 tensors as Megatron-DeepSpeed holds them (2 x 6: two
    norms, query_key_value, dense, dense_h_to_4h, dense_4h_to_h; + embedding, head, final
    norm; 21 with q, k, v and gate, up apart) x 1/2 of them in the partition x 1.901 ms
    0.014258 s: 1.625835 s, all of it exposed (the update follows the last backward)."""
    placement = {**ZERO3_NVME["placement"], "master": "dram", "optimizer": "dram"}
    path = write({**ZERO3_NVME, "placement": placement})
    code, out, err = cli("run", path, "--out", tmp_path / "o")
    assert code == 0, err
    p = 1_117_802_496
    update_s = p / 0.794e9 + p * (8 + 4 + 2) / 76.8e9 + 15 / 2 * 1.901e-3
    rows = [x for x in out.splitlines() if x.startswith("exposed CPU work")]
    assert len(rows) == 2  # the step's table's, and now the prices' own
    assert rows[1].startswith("exposed CPU work (CPU optimizer, host work)")
    assert fmt_time(update_s) in rows[1]  # 1.626 s
    st = json.loads((tmp_path / "o" / "report.json").read_text())["step"]
    rest = st["time_s"] - sum(st["breakdown"].values()) - update_s
    waits = next(x for x in out.splitlines() if "(not priced)" in x)
    assert fmt_time(rest) in waits
