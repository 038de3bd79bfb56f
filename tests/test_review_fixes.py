"""Defects a new user met (the review of the 0.11 CLI): each test failed before its fix."""

from __future__ import annotations

import json

from conftest import scenario
from docs_text import ROOT, page
from problem_lines import said

from tiersim.state.resolved import resolve
from tiersim.workload.fp8 import layer_quantize_bytes

LLAMA = {"name": "x", "model": {"preset": "llama-2-7b"}}


def _deepspeed_pipeline(zero: int) -> dict:
    return {
        **LLAMA,
        "training": {"framework": "deepspeed", "grad_accumulation": 8},
        "parallel": {"data": 4, "pipeline": 2, "zero_stage": zero},
    }


def test_deepspeed_pipeline_refuses_zero_2_and_3(cli, write):
    """DeepSpeed's PipelineEngine asserts zero_optimization_stage() < ZeroStageEnum.gradients,
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    (deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__): no such run exists."""
    for zero in (2, 3):
        file = write(_deepspeed_pipeline(zero))
        code, out, err = cli("validate", file)
        assert code == 2, (out, err)
        assert "Traceback" not in err
        line = err.strip()
        assert said(line, file).coded == ("E-CONFLICT", "parallel.zero_stage")
        assert f"is {zero}" in line and "pipeline" in line


def test_deepspeed_pipeline_with_zero_1_and_other_frameworks_stay_valid(cli, write):
    assert cli("validate", write(_deepspeed_pipeline(1)))[0] == 0
    raw = _deepspeed_pipeline(3)
    raw["training"] = {"grad_accumulation": 8}  # no framework: tiersim's generic engine
    assert cli("validate", write(raw))[0] == 0


# A Llama-like layer by its dimensions: q, k, v, o 4 x 256 x 256 = 262,144 values, gate, up,
# down 3 x 256 x 512 = 393,216: 655,360 linear values. Its FP8 copies (tensorwise): both
# layouts, 1 B a value, and one fp32 scale each: 2 x 655,360 + 2 x 4 B x 7 weights = 1,310,776 B.
FP8_LAYER = 2 * 655_360 + 2 * 4 * 7
# Megatron-Core holds the same values as 4 TE linears (linear_qkv, linear_proj, linear_fc1,
# linear_fc2; state/held_layout.py): 2 x 655,360 + 2 x 4 B x 4 weights = 1,310,752 B
MCORE_FP8_LAYER = 2 * 655_360 + 2 * 4 * 4
TINY = {
    "layers": 4,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 4,
    "ffn_hidden": 512,
    "vocab": 1024,
    "gated_mlp": True,
    "position": "rope",
    "norm": "rmsnorm",
    "max_positions": 512,
}
FP8 = "FP8 weight copies (training.fp8)"


def _fp8_at_peak(cli_json, write, framework: str | None, zero: int) -> int:
    training = {"seq_len": 512, "recompute": "full", "fp8": {"recipe": "tensorwise"}}
    if framework:
        training["framework"] = framework
    raw = {"name": "x", "model": TINY, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": zero}
    report = cli_json(write(raw))
    return report["memory_timeline"]["peak_parts"].get(FP8, 0)


def test_fsdp_fp8_full_recompute_holds_one_layers_copies(cli_json, write):
    """torchtitan's FP8 (torchao Float8Linear, `framework: fsdp`) casts each weight inside its
    forward with no cache, and full recompute saves nothing of a layer but its input: at most
    one layer's copies are live, not the whole model's (they were: 4 x 1,310,776 B)."""
    for zero in (3, 1):
        assert _fp8_at_peak(cli_json, write, "fsdp", zero) <= FP8_LAYER


def test_transformer_engine_fp8_cache_still_holds_every_layer(cli_json, write):
    """Megatron-Core's TE layers cache the copies all step (is_first_microbatch): all 4."""
    assert _fp8_at_peak(cli_json, write, "megatron", 1) == 4 * MCORE_FP8_LAYER == 5_243_008


def test_a_value_where_a_section_goes_names_the_sections_keys(cli, write):
    """`endurance: 3000` for `endurance: {pe_cycles: 3000}`: the message said only "input
    should be a valid dictionary", not which keys the section takes."""
    tiers = {"hbf": {"kind": "flash", "capacity": "1 TB", "bandwidth": "1 TB/s"}}
    tiers["hbf"]["endurance"] = 3000
    file = write({**LLAMA, "hardware": {"preset": "dgx-h100", "tiers": tiers}})
    code, _, err = cli("validate", file)
    assert code == 2 and "Traceback" not in err
    assert said(err.strip(), file).coded == ("E-TYPE", "hardware.tiers.hbf.endurance")
    assert "pe_cycles, required" in err and "write_amplification" in err
    assert "(got 3000)" in err


def test_hbf_page_quotes_the_step_times_tiersim_gives_now(cli, tmp_path):
    """docs/hbf.md's first figures, the HBF step and the same state in host DRAM: the page
    said 17.326 s and 17.389 s where `tiersim compare` printed 17.345 s and 17.408 s."""
    text = page("hbf").split("## 1. Fit and step time", 1)[1].split("## 2.", 1)[0]
    hbf = json.loads((ROOT / "tests/golden/reports/hbf-optimizer-state.json").read_text())
    scenario = ROOT / "scenarios/hbf-optimizer-state.yaml"
    moved = ("--set", "placement.master=dram", "--set", "placement.optimizer=dram")
    code, out, err = cli("run", scenario, *moved, "--format", "json", "--out", tmp_path)
    assert code == 0, err
    dram = json.loads(out)
    said = f"the step takes {hbf['step']['time_s']:.3f} s; with master and moments in\nhost DRAM"
    assert said in text
    assert f"host DRAM over PCIe, {dram['step']['time_s']:.3f} s" in text


def test_hbf_page_quotes_the_lifetimes_tiersim_gives_now():
    """docs/hbf.md's section 2 said HBF wears out in 23.08 days over the whole device and
    lasts 2.934 years at a minute's retention, where `tiersim wear` gives 23.07 days (and so
    2.907 years): the lifetimes a buyer reads there, a version old. Neither key moves the step,
    so each is the scenario's lifetime scaled by hand."""
    text = " ".join(page("hbf").split("## 2. Flash as it behaves", 1)[1].split("## 3.")[0].split())
    hbf = json.loads((ROOT / "tests/golden/reports/hbf-optimizer-state.json").read_text())
    days = hbf["wear"]["hbf"]["lifetime_days"]  # 4,096 GB x 3,000 P/E / bytes a day
    # wear levelled over the state's 105.84 GB instead of the device's 4,096 GB
    span = days * 105.84e9 / 4096e9
    assert f"wears HBF out in {span:.2f} days instead of {days:.2f}." in text
    # a minute's retention: below 3 days the curve keeps its shortest point's 46x the rating
    minute = days * 46 / 365  # years
    assert f"`retention: 1 min`: {3000 * 46:,} cycles, lifetime {minute:.3f} years." in text


def test_science_page_quotes_the_checkpoint_interval_tiersim_gives_now():
    """docs/science.md said hbf-optimizer-state's NVMe budget bounds its checkpoints to every
    83 steps, and that Daly's optimum (every 2) would take 41 drive writes a day and wear the
    drive out in 44.02 days, where `tiersim run` gives 81 steps, 40.5 and 45.1 days."""
    text = " ".join(page("science").split())
    c = json.loads((ROOT / "tests/golden/reports/hbf-optimizer-state.json").read_text())
    c = c["checkpoint"]
    at = c["target_wear_at_optimum"]
    said = (
        f"every {at['interval_steps']} steps, the drain (its snapshot stalls nothing, so Daly's "
        f"optimum is 0 s), {at['drive_writes_per_day']:.1f} drive writes a day on a drive rated "
        f"1, its rated 14.02 PB written gone in {at['rated_lifetime_days']:.1f} days; with it, "
        f"every {c['interval_steps']} steps, goodput {100 * c['goodput']:.2f} %)."
    )
    assert said in text


def test_science_page_quotes_the_fsdp2_offload_step_tiersim_gives_now():
    """docs/science.md said `tiersim run scenarios/fsdp2-cpu-offload-llama2-7b.yaml` gives a
    17.46 s step (GPU compute 12.78 s) where it prints 17.481 s (12.794 s)."""
    text = " ".join(page("science").split())
    r = json.loads((ROOT / "tests/golden/reports/fsdp2-cpu-offload-llama2-7b.json").read_text())
    s, pcie = r["step"], r["links"]["pcie"]["bytes_by_direction"]
    said = (
        f"{s['time_s']:.2f} s a step (GPU compute {s['compute_s']:.2f} s, the CPU update "
        f"{s['optimizer_s']:.2f} s, the three host adds {s['exposed_cpu_s'] - s['optimizer_s']:.2f}"
        f" s, exposed transfer {s['exposed_transfer_s']:.2f} s); PCIe "
        f"{(pcie['dram->hbm'] + pcie['hbm->dram']) / 1e9:.1f} GB a step "
        f"({pcie['dram->hbm'] / 1e9:.1f} GB of fp32 shards in, "
        f"{pcie['hbm->dram'] / 1e9:.1f} GB of fp32 gradients out)"
    )
    assert said in text


def test_hbf_answers_page_dates_its_figures_with_todays_step():
    """docs/hbf-answers.md quotes hbf-optimizer-state at 17.326 s "at this version", the
    version its rules came in: read today, that is a figure tiersim no longer prints. Its
    opening says so, with today's step (the golden report's), kept current by this test."""
    hbf = json.loads((ROOT / "tests/golden/reports/hbf-optimizer-state.json").read_text())
    opening = " ".join(page("hbf-answers").split("## 1.", 1)[0].split())
    assert f"`hbf-optimizer-state` steps in {hbf['step']['time_s']:.3f} s today" in opening


def test_fp8_page_quotes_this_versions_activations(cli_json):
    """docs/fp8.md quoted 18.32 GB and 16.34 GB of activations for the default scenario under
    FP8, an earlier version's, as if `tiersim` printed them today."""
    report = cli_json(ROOT / "scenarios/default.yaml", "--set", "training.fp8.recipe=delayed")
    gb = report["inventory"]["per_gpu"]["activations"] / 1e9
    assert f"activations {gb:.2f} GB a GPU.\n" in page("fp8")


# TINY's four forward linears (M, N, K) at 512 tokens: QKV (512, 256 + 2 x 256, 256),
# out-projection (512, 256, 256), gate/up (512, 2 x 512, 256), down (512, 256, 512)
TINY_LINEARS = [(512, 768, 256), (512, 256, 256), (512, 1024, 256), (512, 256, 512)]
# inputs sum(M x K) = 3 x 131,072 + 262,144 = 655,360; weights sum(K x N) = 196,608 + 65,536 +
# 262,144 + 131,072 = 655,360; tensorwise moves 6 B a value quantized (workload/fp8.py)
INPUTS, WEIGHTS, TENSORWISE_B = 655_360, 655_360, 6


def _forward_quantize_bytes(framework: str) -> float:
    training = {"seq_len": 512, "grad_accumulation": 4, "fp8": {"recipe": "tensorwise"}}
    training["framework"] = framework
    raw = {"name": "x", "model": TINY, "training": training, "parallel": {"data": 2}}
    r = resolve(scenario(raw))
    return layer_quantize_bytes(r, TINY_LINEARS, 0.0)[0]


def test_torchao_casts_the_weights_in_every_micro_batch():
    """torchao's Float8Linear (framework: fsdp) has no weight cache: each micro-batch's
    forward casts the weights again, where TE casts them on the step's first micro-batch only
    (is_first_microbatch): 6 x (inputs + weights), not 6 x (inputs + weights / 4)."""
    assert _forward_quantize_bytes("fsdp") == TENSORWISE_B * (INPUTS + WEIGHTS)
    assert _forward_quantize_bytes("megatron") == TENSORWISE_B * (INPUTS + WEIGHTS / 4)


def test_fsdp_without_an_implementation_says_whose_layer_is_counted(cli, write):
    """`framework: fsdp` left `implementation` at megatron silently: the activations of a
    layer no FSDP2 run executes (the shipped FSDP2 scenario's peak: 13.38 GB as megatron's
    with its 0.1 dropouts then, 8.18 GB as torchtitan's), with nothing said."""
    raw = {**LLAMA, "training": {"framework": "fsdp"}, "parallel": {"data": 2, "zero_stage": 3}}
    code, _, err = cli("validate", write(raw))
    assert code == 0
    assert "training.implementation: not given" in err and "[W-DEFAULT]" in err
    raw["training"]["implementation"] = "torchtitan"
    code, _, err = cli("validate", write(raw))
    assert code == 0 and "training.implementation" not in err


def test_a_scenario_with_a_stray_base_key_is_judged_as_a_scenario(cli, write):
    """A top-level `base:` (an anchors' holder) made a scenario a sweep: `model: unknown key`
    and "nothing to sweep", where the scenario's one fault is the stray key."""
    text = "base: &b {preset: llama-2-7b}\nname: x\nmodel: {<<: *b}\n"
    file = write(text)
    code, _, err = cli("validate", file)
    assert code == 2 and "Traceback" not in err
    assert said(err.strip(), file).coded == ("E-KEY-UNKNOWN", "base")


def test_fsdp_fp8_layers_left_uncheckpointed_keep_no_fp8_copy(cli_json, write):
    """recompute_every 2 checkpoints every other layer (torchtitan's selective_ac_option 2):
    the other two of TINY's 4 keep what they save, and torchao's Float8Linear saves its bf16
    input and its weight parameter, no FP8 copy (state/fp8.py, tests/test_fp8_torchao.py):
    at most one GEMM's cast, the largest weight 256 x 512 (131,072 values) at 1 B with one fp32
    scale, 131,076 B, is live at the peak (this test asked for more than a layer's before)."""
    training = {"seq_len": 512, "recompute": "full", "recompute_every": 2, "framework": "fsdp"}
    training["fp8"] = {"recipe": "tensorwise"}
    raw = {"name": "x", "model": TINY, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    report = cli_json(write(raw))
    assert report["memory_timeline"]["peak_parts"].get(FP8, 0) <= 131_072 + 4


def test_api_page_run_cell_prints_what_the_run_gives():
    """docs/api.md's first simulate cell showed 50.4 ms and 81,251 tokens/s, and an HBM of
    141 GB, where the cell gives 54.3 ms, 75,414 tokens/s and 150.11 GB (the capacity as
    CUDA gives it): a notebook user's first figures disagreed with the page."""
    from tiersim import api

    s = api.load(ROOT / "scenarios/seed-1b-adam.yaml", {"training.micro_batch_size": 2})
    run = api.run(s)
    step = run.report["step"]
    text = page("api")
    said = f"# {1000 * step['time_s']:.1f} ms a step, {step['tokens_per_s']:,.0f} tokens/s"
    assert said in text
    assert f"'capacity_bytes': {run.tiers().to_pylist()[0]['capacity_bytes']}," in text
