"""Review 2026-12-08 (b): a demanding first-time user's pass over tiersim 0.25.0, with three
scenarios written from the docs alone (Llama 3 8B under FSDP2, a Mixtral with expert
parallelism, a 70B with its optimizer state on HBF; docs/review-2026-12-08-b.md). Each test
fails on the tree before its fix; expected values are worked by hand in each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "scenarios" / "seed-1b-adam.yaml"


def test_compare_says_how_many_tokens_each_step_is_for(cli):
    # review (b) #1: comparing two designs at different batches (an imported DeepSpeed config's
    # global_batch_size against a hand-written grad_accumulation) listed the step time moving
    # x9.7 and nothing saying that B's step trains 8x the tokens: the row that says it
    # seed-1b-adam: data 1 x micro-batch 1 x grad_accumulation 1 x seq_len 2,048 (no
    # max_positions: the default length) = 2,048 tokens a step; grad_accumulation 3: 6,144
    code, out, err = cli(
        "compare", SEED, "--set", "training.grad_accumulation=3", "--format", "json"
    )
    assert code == 0, err
    moved = {r["path"]: r for r in json.loads(out)["outputs"]}
    row = moved["step.tokens_per_step"]
    assert (row["a"], row["b"], row["delta"], row["ratio"]) == (2048, 6144, 4096, 3.0)
    paths = [r["path"] for r in json.loads(out)["outputs"]]
    assert paths[:2] == ["step.time_s", "step.tokens_per_step"]  # beside the time it is for
    code, out, err = cli("compare", SEED, "--set", "training.grad_accumulation=3")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("step.tokens_per_step "))
    assert line.split()[1:] == ["2,048", "tokens", "6,144", "tokens", "+4,096", "tokens", "x3.000"]


def test_a_tensor_size_the_heads_refuse_says_which_sizes_they_take(cli, tmp_path):
    # review (b) #2: "kv_heads (2) and the tensor-parallel size (3) must divide one another"
    # said the rule and not what to write; the sizes both rules allow, worked by hand for
    # Qwen2.5-1.5B (12 heads, 2 kv_heads): the divisors of 12 are 1, 2, 3, 4, 6, 12; of those
    # 1 and 2 divide 2, and 4, 6 and 12 are multiples of 2; 3 is neither
    path = tmp_path / "q.yaml"
    path.write_text(
        "name: q\nmodel: {preset: qwen2.5-1.5b}\nparallel: {tensor: 3}\n"
        "hardware: {preset: dgx-h100}\n"
    )
    code, out, err = cli("validate", path)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"{path}: parallel.tensor: kv_heads (2) and the tensor-parallel size (3) must divide "
        "one another (expected a size dividing the heads (12) that divides the kv_heads (2) or "
        "is a multiple of them: 1, 2, 4, 6, 12) (line 3) [E-LAYOUT]"
    )
    # and interleaving without a pipeline says what to give
    code, _, err = cli("validate", path, "--set", "parallel.tensor=2")
    assert code == 0, err
    code, _, err = cli("validate", path, "--set", "parallel.virtual_pipeline=2")
    assert code == 2
    assert "interleaving needs pipeline > 1 (expected parallel.pipeline of 2 or more" in err


def test_a_link_from_a_tier_to_itself_says_what_it_expects(cli):
    # review (b) #3: "joins a tier to itself" named neither the tier nor what to give
    code, _, err = cli("validate", SEED, "--set", "hardware.links.pcie.between=[hbm, hbm]")
    assert code == 2
    assert err.strip() == (
        f"{SEED}: hardware.links.pcie.between: joins a tier to itself (hbm; expected two "
        "tiers, e.g. [hbm, dram]) (from --set hardware.links.pcie.between=[hbm, hbm]) "
        "[E-CONFLICT]"
    )


FSDP2 = """name: f
model: {preset: llama-3-8b}
training:
  framework: fsdp
  implementation: torchtitan
  precision: {weights: bf16, gradients: bf16, master: fp32, optimizer: fp32}
parallel: {data: 8, zero_stage: 3}
hardware: {preset: dgx-h100}
"""


def test_a_master_copy_beside_fsdp2s_shards_is_noted(cli, tmp_path):
    # review (b) #4: Llama 3 8B under FSDP2 written with DeepSpeed's and Megatron's precision
    # (bf16 weights, an fp32 master) ran in silence: FSDP2 keeps one sharded copy, which the
    # optimizer steps (torch 2.13 _fully_shard), so such a file counts a bf16 shard, an fp32
    # master and bf16 gradient shards that torchtitan (fp32 shards and gradients, bf16
    # compute) does not have
    path = tmp_path / "f.yaml"
    path.write_text(FSDP2)
    code, _, err = cli("validate", path)
    assert code == 0
    assert err == (
        f"note: {path}: training.precision.master: fp32 beside weights bf16 under "
        "training.framework: fsdp: FSDP2 keeps one sharded copy of each parameter, which the "
        "optimizer steps, and no master beside it; counted as written (the shards in bf16, "
        "the master in fp32, the gradient shards in bf16, reduced in bf16); expected FSDP2's "
        "mixed precision as torchtitan runs it, training.precision: {weights: fp32, "
        "gradients: fp32, master: none, compute: bf16} (Accelerate's reduces in bf16: "
        'gradients: bf16; docs/fsdp2-memory.md, "Mixed precision") (line 6) '
        "[W-FRAMEWORK-LIMIT]\n"
    )
    # FSDP2's own mixed precision, and the same mix under DeepSpeed (whose master it is): none
    titan = "{weights: fp32, gradients: fp32, master: none, optimizer: fp32, compute: bf16}"
    assert cli("validate", path, "--set", f"training.precision={titan}")[2] == ""
    deepspeed = cli("validate", path, "--set", "training.framework=deepspeed")
    assert deepspeed[0] == 0 and "training.precision.master" not in deepspeed[2]
    shipped = ROOT / "scenarios" / "fsdp2-cpu-offload-llama2-7b.yaml"  # master: none
    assert "W-FRAMEWORK-LIMIT" not in cli("validate", shipped)[2]


def test_break_even_without_a_budget_says_there_is_nothing_to_hold(cli):
    # review (b) #5: `wear --break-even` with no budget.<tier> printed the wear table (and
    # HBF's ranges) and no break-even line, and nothing said why; as `--check` does, a note
    code, out, err = cli("wear", SEED, "--break-even")
    assert code == 0 and "Break-even for" not in out
    assert err == (
        f"note: {SEED}: budget: --break-even has no budget to break even against: no tier "
        "that wears has a write budget (budget.<tier>: lifetime, drive_writes_per_day or "
        "total_bytes_written), so only HBF's lifetime across its unpublished figures follows "
        "(expected a budget, e.g. --set budget.hbf.lifetime='5 years') [W-NO-EFFECT]\n"
    )
    code, out, err = cli("wear", SEED, "--break-even", "--set", "budget.hbf.lifetime=5 years")
    assert code == 0 and "Break-even for hbf" in out and "W-NO-EFFECT" not in err


def test_break_even_plot_without_hbf_is_refused_before_any_simulation(cli, tmp_path):
    # review (b) #6: `wear --break-even --plot` on a machine without HBF ran the wear (and,
    # with a budget, about 30 break-even simulations) and only then refused the plot; its
    # help promises the refusal before anything is simulated. A scenario whose simulation
    # cannot run (exit 3: a 100M-token sequence holds no layer in 80 GB) tells the order: the
    # refusal (exit 2) comes first, where before the simulation's exit 3 did
    path = tmp_path / "h.yaml"
    path.write_text(
        "name: h\nmodel: {preset: llama-3-8b}\ntraining: {seq_len: 100000000}\n"
        "hardware: {preset: dgx-h100}\nbudget: {nvme: {lifetime: 5 years}}\n"
    )
    assert cli("wear", path)[0] == 3
    code, out, err = cli("wear", path, "--break-even", "--plot", tmp_path / "r.png")
    assert (code, out) == (2, "")
    assert err.endswith(
        f"--plot: {tmp_path / 'r.png'}: no hbf tier with endurance to draw: the picture is "
        "HBF's lifetime across its unpublished figures (expected a machine with one, e.g. "
        "hardware.preset: h200-hbf, or no --plot) [E-OPTION]\n"
    )
    assert not (tmp_path / "r.png").exists()


def test_a_target_of_years_is_said_in_years_too(cli, tmp_path):
    # review (b) #7: Llama 3 70B on 8 GPUs toward 15 T tokens: "15 T tokens take 57,220,459
    # steps, 38,098.4 days", a figure a planner reads as 104 years only with a calculator
    sets = ("--set", "training.total_tokens=1.5e13")
    code, out, err = cli("run", SEED, *sets, "--format", "json", "--out", tmp_path / "j")
    assert code == 0, err
    days = json.loads(out)["target"]["days_for_total"]
    years = days / 365  # tiersim's year is 365 days (docs/scenarios.md)
    assert years > 1
    code, out, err = cli("run", SEED, *sets, "--out", tmp_path / "t")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("Target: "))
    assert line.endswith(f", {days:,.1f} days ({years:,.1f} years).")
    # under a year, days alone: 1e9 tokens at this step's rate take well under one
    code, out, err = cli("run", SEED, "--set", "training.total_tokens=1e9", "--out", tmp_path / "u")
    line = next(x for x in out.splitlines() if x.startswith("Target: "))
    assert line.endswith(" days.") and "years" not in line


def test_the_ranges_picture_keeps_each_write_bandwidths_line_in_sight():
    # review (b) #8: on Llama 3 70B the three write bandwidths' lifetimes lie within 8 % of
    # each other; drawn alike (one marker, one width), the last drew over the preset's own
    # 50 GB/s line. Each now has its own marker, each narrower than the one drawn before it
    pytest.importorskip("matplotlib")
    from tiersim.report.ranges_plot import ranges_figure

    cases = [
        {
            "write_bandwidth": bw,
            "pe_cycles": pe,
            "step_s": step,
            "lifetime_days": pe / 40.0,  # any lifetime: the picture's drawing is checked
            "span_lifetime_days": pe / 1500.0,
            "span_bytes": 105_840_000_000,
        }
        for bw, step in ((25e9, 59.6), (50e9, 57.5), (200e9, 55.9))
        for pe in (1_000, 3_000, 100_000)
    ]
    fig = ranges_figure({"tier": "hbf", "cases": cases}, 5 * 365.0)
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("write ")]
    assert len(lines) == 6  # whole device and span, for each of three bandwidths
    by_bandwidth = [lines[i : i + 2] for i in (0, 2, 4)]
    markers = [pair[0].get_marker() for pair in by_bandwidth]
    widths = [pair[0].get_linewidth() for pair in by_bandwidth]
    sizes = [pair[0].get_markersize() for pair in by_bandwidth]
    assert len(set(markers)) == 3
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 3


def test_a_default_taken_is_not_blamed_on_another_key_set_beside_it(cli, tmp_path):
    # review (b) #9: GPT-2 written by its dimensions, its biases given by --set: the note that
    # position and norm were left out said "(from --set model.qkv_bias=true, ...)", where the
    # file's model section (line 2) left them out
    path = tmp_path / "g.yaml"
    path.write_text(
        "name: g\nmodel: {layers: 12, hidden: 768, heads: 12, ffn_hidden: 3072, vocab: 50257, "
        "max_positions: 1024, tied_embeddings: true}\nhardware: {preset: dgx-h100}\n"
    )
    code, _, err = cli("validate", path, "--set", "model.qkv_bias=true")
    assert code == 0
    (note,) = [x for x in err.splitlines() if "[W-DEFAULT]" in x]
    assert note.startswith(f"note: {path}: model: position and norm not given: took")
    assert note.endswith("(line 2) [W-DEFAULT]")
    # a --set that replaces the whole model section is what left them out: said so
    code, _, err = cli(
        "validate",
        path,
        "--set",
        "model={layers: 2, hidden: 64, heads: 2, ffn_hidden: 256, vocab: 100, max_positions: 64}",
    )
    (note,) = [x for x in err.splitlines() if "[W-DEFAULT]" in x]
    assert "(from --set model={layers: 2," in note
