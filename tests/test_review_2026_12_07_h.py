"""Findings of the eighth 2026-12-07 review, the H200 + HBF buyer's for Llama-3-70B and a
DeepSeek-style MoE (docs/review-2026-12-07-h.md), one test each; expected values by hand."""

from __future__ import annotations

import json
import math

import pytest
from conftest import scenario

from tiersim.analysis.cost import costing, costing_of
from tiersim.cli import main
from tiersim.config.load import load_scenario
from tiersim.core.errors import InputError
from tiersim.frameworks.emit import emit
from tiersim.plan.rank import binds
from tiersim.report.cost import cost_comparison, cost_text, costing_dict

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


def _report(steps_per_day: float, possible: float) -> dict:
    """A report as `costing_of` reads it: one GPU at 1,000 goodput tokens/s, 4 TB of HBF
    that wears out in 700 days at `steps_per_day`."""
    hbf = {"capacity_bytes": 4e12, "resident_bytes": 1, "peak_bytes": 1}
    wear = {"lifetime_days": 700.0, "steps_per_day": steps_per_day}
    wear["steps_per_day_possible"] = possible
    return {"tiers": {"hbf": hbf}, "wear": {"hbf": wear}, "step": {"tokens_per_s": 1000.0}}


def test_flash_bought_again_as_it_wears_out_costs_its_capital_over_the_tokens_it_saw():
    """Finding 2: HBF's capital per token was its cost per calendar hour over the tokens a
    24/7 run makes an hour, while its wear lifetime was counted at budget.steps_per_day: at
    5,000 of the 26,942 steps a day a 3.207 s step allows, 5.39x too cheap (0.05217 against
    0.2811 price units per million tokens). By hand: the drive lasts 700 days x 5,000 steps
    = 3.5e6 steps; a step is 86,400 / 25,000 = 3.456 s, 3,456 tokens at 1,000 a second: it
    sees 1.2096e10 tokens for its 0.5 x 4,000 GB = 2,000 of capital, 2,000 / 12,096 per
    million tokens."""
    c = costing_of(1, None, {"hbf": 0.5}, None, _report(5_000, 25_000))
    assert c.per_million_tokens == pytest.approx(2_000 / 12_096, rel=1e-12)  # 0.165344
    # training 24/7 (steps_per_day the step's own), the figure is as before: 2,000 over
    # 700 x 24 hours, over 3.6e6 tokens an hour
    full = costing_of(1, None, {"hbf": 0.5}, None, _report(25_000, 25_000))
    assert full.per_million_tokens == pytest.approx(2_000 / (700 * 24) / 3.6, rel=1e-12)
    # compare says why: 5,000 of 25,000 steps a day is 20.0 % of each day
    section = {"a": costing_dict(c), "b": None, "why": "only A gives prices"}
    assert costing_dict(c)["training_share_of_day"] == 0.2
    assert "\nA trains 20.0 % of each day (budget.steps_per_day against" in cost_text(section)
    assert "trains" not in cost_text({"a": costing_dict(full), "b": None, "why": "."})


# GPT-2 with AdamW's master and moments on HBF, an auto checkpoint to NVMe: HBF fails its
# 5-year budget and the accumulation remedy's run resolves its own auto interval
HBF_AUTO = (
    "name: g\nmodel: {preset: gpt2}\ntraining: {seq_len: 256, optimizer: adamw}\n"
    "placement: {optimizer: hbf, master: hbf}\nhardware: {preset: h200-hbf}\n"
    "checkpoint: {every_steps: auto, target: nvme, mode: async}\nfailures: {mtbf: 6 h}\n"
    "budget: {hbf: {lifetime: 5 years}}\n"
)


def test_the_wear_tables_accumulation_remedy_keeps_its_checkpoint_in_a_row_of_its_own(
    tmp_path, capsys
):
    """Finding 3: `wear`'s table put the remedy's whole sentence in one cell, ">= 26 (then
    1,916.30 steps/day, with the auto checkpoint every step, 8.367 s of training, goodput
    98.60 %)": the HBF column grew to 106 characters and the figure sat under the NVMe
    column. The cell keeps the accumulation and its pace; the checkpoint has its own row."""
    path = tmp_path / "g.yaml"
    path.write_text(HBF_AUTO)
    assert main(["wear", str(path), "--format", "json"]) == 0
    g = json.loads(capsys.readouterr().out)["wear"]["hbf"]["remedies"]["grad_accumulation"]
    assert main(["wear", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {ln[:28].strip(): ln[28:].strip() for ln in lines if ln.startswith(("fits", "  then"))}
    # one step of the remedy's 19.6 s (fmt_time: 3 decimals in s), goodput at 2 decimals
    assert g["checkpoint_interval_steps"] == 1 and 1 <= g["checkpoint_interval_s"] < 60
    pace = f"{math.floor(g['steps_per_day'] * 100) / 100:,.2f}"  # rounded down: it holds
    assert rows["fits at grad_accumulation"] == f">= {g['value']:,} (then {pace} steps/day)"
    auto = (
        f"every step, {g['checkpoint_interval_s']:.3f} s of training, goodput "
        f"{100 * g['goodput']:.2f} %"
    )
    assert rows["then the auto checkpoint"] == auto
    # the verdict above the table still says it whole
    assert f"(then {pace} steps/day, with the auto checkpoint {auto})" in lines[0]


def test_a_context_parallel_run_is_priced_on_every_gpu_it_runs_on():
    """Finding 4: `compare`'s cost counted data x tensor x pipeline GPUs, leaving context
    parallelism out (the plan counted the mesh's world): Llama-3-70B on 256 GPUs against the
    same with context 2 (512 GPUs, 310,713 tokens/s) read "B is cheaper per token", 1.069
    against 2.045, where B's GPU-hours alone cost 1.857. And the reason read "A makes fewer
    tokens a second", the job's total, where the GPUs differ. Here A is data 2 x tensor 2 x
    context 2 = 8 GPUs at 4 an hour, 1,000 tokens a second: 8 x 4 / 3.6e6 x 1e6 = 8.889 per
    million tokens; B the same without context, 4 GPUs, 900 tokens a second: 4 x 4 /
    3.24e6 x 1e6 = 4.938, and B makes more a GPU (225 against 125)."""
    model = {"layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 512, "vocab": 1000}
    raw = {"model": {**model, "position": "rope"}, "hardware": HW}
    a = scenario({"name": "a", **raw, "parallel": {"data": 2, "tensor": 2, "context": 2}})
    b = scenario({"name": "b", **raw, "parallel": {"data": 2, "tensor": 2}})
    rep_a = {"step": {"tokens_per_s": 1000.0}, "tiers": {}}
    rep_b = {"step": {"tokens_per_s": 900.0}, "tiers": {}}
    assert costing(a, rep_a).gpus == 8
    assert costing(a, rep_a).per_million_tokens == pytest.approx(8 * 4 / 3.6e6 * 1e6, rel=1e-12)
    assert costing(b, rep_b).per_million_tokens == pytest.approx(4 * 4 / 3.24e6 * 1e6, rel=1e-12)
    why = cost_comparison(a, b, rep_a, rep_b)["why"]
    assert why == (
        "B is cheaper per token: 8.889 (A) against 4.938 (B) price units per million tokens; "
        "the largest difference is GPU-hours (3.951 price units per million tokens): A makes "
        "fewer tokens a second per GPU (125 (A) against 225 (B), after checkpoints and failures)."
    )


HW = {"preset": "h200-hbf", "price_per_gpu_hour": 4}


def test_a_failure_count_other_than_the_layouts_gpus_is_noted(tmp_path, capsys):
    """Finding 5: `failures: {gpu_mtbf: 50000 h, gpus: 128}` beside tensor 8 x pipeline 4 x
    data 8 (256 GPUs) validated in silence, the job's MTBF twice the layout's; `gpus` beside
    a job `mtbf` did nothing, also in silence. By hand: 50,000 h / 128 = 390.6 h = 16.3 days,
    / 256 = 195.3 h = 8.1 days."""
    model = "model: {layers: 4, hidden: 256, heads: 8, ffn_hidden: 512, vocab: 1000}\n"
    path = tmp_path / "f.yaml"
    path.write_text(
        "name: f\n" + model.replace("}", ", position: rope}") + "parallel: {tensor: 8, "
        "pipeline: 4, data: 8}\nfailures: {gpu_mtbf: 50000 h, gpus: 128}\n"
    )
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert (
        "failures.gpus: 128 GPUs failing independently, where the parallel layout runs tensor 8 "
        "x data 8 x pipeline 4 = 256 GPUs: the job's MTBF is gpu_mtbf / 128 = 16.3 days, against "
        "8.1 days over the layout's GPUs (leave failures.gpus out to take them)"
    ) in err and "[W-GPU-COUNT]" in err
    assert main(["validate", str(path), "--set", "failures.gpus=256"]) == 0
    assert "failures.gpus" not in capsys.readouterr().err
    sets = ["--set", "failures={mtbf: 6 h, gpus: 256}"]
    assert main(["validate", str(path), *sets]) == 0
    assert "failures.gpus: 256 has no effect without failures.gpu_mtbf" in capsys.readouterr().err


def test_an_abbreviated_count_and_a_list_of_choices_are_refused_with_what_to_write(tmp_path):
    """Findings 6 and 7: `seq_len: 8k` was refused "input should be a valid integer (got
    '8k')", and `placement: {optimizer: [hbf, dram]}` (the choices a user means to compare)
    "input should be a valid string (got ['hbf', 'dram'])", neither saying what to write."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: {preset: gpt2}\ntraining: {seq_len: 1.5k}\n"
        "placement: {optimizer: [hbf, dram]}\n"
    )
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    said = {p.path: p.message for p in caught.value.problems}
    # 1.5 x 1,024 = 1,536 or 1.5 x 1,000 = 1,500
    assert said["training.seq_len"] == (
        "input should be a valid integer (got '1.5k'); 1.5k is not read as a count: write it "
        "out, e.g. 1536 or 1500 (line 3)"
    )
    assert said["placement.optimizer"] == (
        "input should be a valid string (got ['hbf', 'dram']); one value here: to search "
        "several, list them in a plan: section (plan: {placement.optimizer: [...]}) or a sweep "
        "file's grid (line 4)"
    )
    assert {p.code for p in caught.value.problems} == {"E-TYPE"}


def test_the_busiest_port_line_says_how_much_of_the_step_waits_on_transfers(tmp_path, capsys):
    """Finding 8: `run` of Llama-3-70B with an async checkpoint to NVMe named "busiest
    (step.bottleneck): the nvme write port, 18.8 %" and nothing else on what bounds the step:
    the drain runs beside the step (it stalls nothing), and the GPU waits on transfers 2.0 %
    of the step. The line now gives that share, exposed transfer / step time (by hand from
    the report's two figures)."""
    path = tmp_path / "g.yaml"
    path.write_text(HBF_AUTO)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    step = json.loads((tmp_path / "out" / "report.json").read_text())["step"]
    waits = 100 * step["exposed_transfer_s"] / step["time_s"]
    line = next(ln for ln in out.splitlines() if ln.startswith("busiest (step.bottleneck)"))
    assert line.endswith(
        f"; the GPU waits on transfers for {waits:.1f} % of the step (exposed transfer, in the "
        "step's table): bandwidth bounds no more of it than that"
    )


def test_a_plans_binds_line_gives_the_exposed_transfer_beside_the_busiest_port():
    """Finding 8, in `plan`: "binds: compute 51.5 %, pipeline bubble 28.7 %, exposed
    collectives 18.2 % of 3.209 s; busiest: nvme write port at 18.8 %" read as if the NVMe
    bound the step. The line now gives the exposed transfer's share before the busiest. By
    hand: a 10 s step of 6 s compute (60.0 %), 2.5 s bubble (25.0 %), 1 s collectives
    (10.0 %) and 0.5 s exposed transfer (5.0 %)."""
    step = {"time_s": 10.0, "compute_s": 6.0, "exposed_transfer_s": 0.5, "exposed_cpu_s": 0.0}
    step |= {"exposed_collective_s": 1.0, "pipeline_bubble_s": 2.5, "optimizer_on": "cpu"}
    step["bottleneck"] = {"resource": "nvme write port", "bandwidth_utilization": 0.188}
    tiers = {"hbm": {"peak_bytes": 50e9, "capacity_bytes": 100e9}}
    assert binds({"step": step, "tiers": tiers})["time"] == (
        "compute 60.0 %, pipeline bubble 25.0 %, exposed collectives 10.0 % of 10.000 s; "
        "transfers exposed 5.0 %, busiest: nvme write port at 18.8 %"
    )
    # where the exposed transfer is among the three parts named, it is not said twice: a
    # 10 s step of 4 s exposed transfer (40.0 %), 2.5 s bubble (25.0 %), 2 s compute (20.0 %)
    step |= {"compute_s": 2.0, "exposed_transfer_s": 4.0}
    assert binds({"step": step, "tiers": tiers})["time"] == (
        "exposed transfer 40.0 %, pipeline bubble 25.0 %, compute 20.0 % of 10.000 s; "
        "busiest: nvme write port at 18.8 %"
    )


def test_an_emitted_megatron_or_torchtitan_file_keeps_context_parallelism():
    """Finding 9: `compare l70.yaml --set parallel.context=2 --emit megatron` wrote no
    `--context-parallel-size`, headed the script "256 GPUs" for a 512-GPU layout and noted
    "parallel.context: 2: not said by the megatron file (importing it gives 1)", though the
    importer reads the flag (and torchtitan's `context_parallel_degree`). Data 2 x tensor 2 x
    context 2 is 8 GPUs."""
    model = {"layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 512, "vocab": 1000}
    s = scenario(
        {"name": "cp", "model": {**model, "position": "rope"}, "hardware": HW}
        | {"parallel": {"data": 2, "tensor": 2, "context": 2}}
    )
    for kind, said in (("megatron", "--context-parallel-size 2"), ("torchtitan", "= 2")):
        out = emit(s, kind)
        assert "8 GPUs" in out.text.splitlines()[0 if kind == "torchtitan" else 1]
        assert said in next(ln for ln in out.text.splitlines() if "context" in ln)
        assert "parallel.context" not in {n.path for n in out.notes}


def test_a_missing_file_says_what_was_expected_and_where_it_was_looked_for(
    tmp_path, capsys, monkeypatch
):
    """Finding 12: `run nothere.yaml` said "nothere.yaml: file not found", neither what was
    expected nor where a relative path was looked for; `compare l70.yaml results/nothere`
    (a mistyped results folder) said "file not found" of what may be a folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("name: s\nmodel: {preset: gpt2}\n")
    assert main(["run", "nothere.yaml"]) == 2
    where = tmp_path / "nothere.yaml"
    assert capsys.readouterr().err == (
        f"nothere.yaml: file not found (expected a YAML file at {where}) [E-FILE]\n"
    )
    assert main(["compare", "s.yaml", "results/nothere"]) == 2
    assert capsys.readouterr().err.endswith(
        "results/nothere: not found (expected a scenario file or a results folder, at "
        f"{tmp_path / 'results' / 'nothere'}) [E-FILE]\n"
    )
