"""Review 2026-12-07 (e): an ML infrastructure lead sizing Llama 3 70B and 8B FP8 runs on
H100, H200 and B200 nodes (docs/review-2026-12-07-e.md). Each test fails on the tree before
its fix."""

import json
import re

import pytest
from conftest import ROOT, SCENARIOS

# what such a user writes first: FP8 on Megatron-style code, no attention kernel named
FP8_8B = """name: l8-fp8
model: {preset: llama-3-8b}
training: {micro_batch_size: 1, grad_accumulation: 8, seq_len: 8192, fp8: {recipe: delayed}}
parallel: {data: 8, zero_stage: 1}
hardware: {preset: dgx-h100}
"""
NOTE = "training.attention_kernel: not given: attention is counted and timed as Megatron's eager"


def test_fp8_without_an_attention_kernel_is_told_it_runs_eager_attention(cli, tmp_path):
    """`training.fp8` (Transformer Engine's linears) with no `attention_kernel` ran Megatron's
    eager attention, every score kept: Llama 3 8B at 8,192 tokens on dgx-h100 needed 234.72 GB
    of HBM and 9.354 s a step, against flash's 97.31 GB and 5.100 s, without a word."""
    path = tmp_path / "l8.yaml"
    path.write_text(FP8_8B)
    code, _, err = cli("validate", path)
    assert code == 0 and NOTE in err and "[W-DEFAULT]" in err, err
    assert "set attention_kernel: flash" in err
    for kernel in ("eager", "flash"):  # named: the user chose it, nothing to say
        code, _, err = cli("validate", path, "--set", f"training.attention_kernel={kernel}")
        assert code == 0 and "attention_kernel" not in err, (kernel, err)
    code, _, err = cli("validate", path, "--set", "training.fp8=null")  # bf16: no TE implied
    assert code == 0 and "attention_kernel" not in err, err
    code, _, err = cli("validate", path, "--set", "training.implementation=torchtitan")
    assert code == 0 and NOTE not in err, err  # torchtitan's default is sdpa, not eager
    # NeMo's shipped FP8 runs name their kernel
    published = SCENARIOS / "published" / "nemo2407-llama3-8b-8gpus.yaml"
    code, _, err = cli("validate", published)
    assert code == 0 and NOTE not in err, err


def test_a_mistyped_machine_is_pointed_at_the_same_gpu_not_a_spelling_neighbour(cli, tmp_path):
    """`hardware.preset: dgx-h200` (DGX H200, what such a user types) was told "did you mean
    'dgx-h100'?", another GPU, and `hgx-h200` "gh200"; `h100-sxm` and `b200-sxm` got no hint.
    A part with a digit and a letter (a chip, a size) now finds the presets holding it."""
    from tiersim.config.presets import closest_preset, preset_names

    machines = preset_names("hardware")
    cases = {
        "dgx-h200": "h200-hbf",  # the only H200 preset (its HBF tier unused unless placed)
        "hgx-h200": "h200-hbf",
        "h100-sxm": "dgx-h100",
        "b200-sxm": "dgx-b200",
        "h100": "dgx-h100",  # a whole part, as before
        "dgx-h10": "dgx-h100",  # no such part: difflib's, as before
    }
    for given, meant in cases.items():
        assert closest_preset(given, machines) == meant, given
    assert closest_preset("qwen3-30b", preset_names("models")) == "qwen3-30b-a3b"  # not 8b
    assert closest_preset("gpt-3", preset_names("models")) == "gpt2-xl"  # a bare 3: difflib's
    path = tmp_path / "l8.yaml"
    path.write_text(FP8_8B)
    code, _, err = cli("validate", path, "--set", "hardware.preset=dgx-h200")
    assert code == 2 and "unknown preset 'dgx-h200' (did you mean 'h200-hbf'?" in err, err


def test_wear_check_without_a_budget_says_it_cannot_fail(cli, tmp_path):
    """`wear --check` on optimizer state offloaded to NVMe with no `budget:` exited 0 in
    silence, which a batch job reads as a budget held (the drive lasts 1.7 years at 70B's
    step). Two layers keep the simulation cheap; the note is the same."""
    path = tmp_path / "l8.yaml"
    path.write_text(FP8_8B)
    nvme = ("--set", "placement.optimizer=nvme", "--set", "model.layers=2")
    said = "budget: --check has nothing to check: no tier that wears has a write budget"
    code, out, err = cli("wear", path, *nvme, "--check")
    assert code == 0 and said in err and "[W-NO-EFFECT]" in err, err
    assert "no budget set" in out
    code, _, err = cli("wear", path, *nvme)  # without --check: nothing to say
    assert said not in err
    budget = ("--set", "budget.nvme.lifetime=1 year")
    code, _, err = cli("wear", path, *nvme, *budget, "--check")
    assert said not in err  # a budget: --check judges it (held or not)


def test_run_and_inventory_name_the_machine_their_figures_are_for(cli, tmp_path, monkeypatch):
    """report.json names no hardware, and neither did `run`'s text, `inventory`'s or step.png:
    runs of one file with `--set hardware.preset=` dgx-h100, h200-hbf and dgx-b200 printed
    headlines alike but for their figures. The plot's title is read off the figure as drawn
    (its PNG encoding stood in for)."""
    import tiersim.report.plot as plot

    path = tmp_path / "l8.yaml"
    path.write_text(FP8_8B)
    small = ("--set", "model.layers=2", "--set", "training.attention_kernel=flash")
    titles = []
    monkeypatch.setattr(plot, "png_bytes", lambda fig: titles.append(fig.get_suptitle()) or b"")
    code, out, err = cli("run", path, *small, "--out", tmp_path / "h100", "--plot")
    assert code == 0, err
    assert out.startswith("l8-fp8 on dgx-h100 (H100 80GB SXM; 8 GPUs, 8 a node): "), out
    assert titles[0].startswith("l8-fp8 on dgx-h100 (H100 80GB SXM; 8 GPUs, 8 a node): ")
    b200 = ("--set", "hardware.preset=dgx-b200", "--set", "parallel.data=16")
    code, out, err = cli("run", path, *small, *b200, "--out", tmp_path / "b200")
    assert out.startswith("l8-fp8 on dgx-b200 (B200; 16 GPUs, 8 a node): "), out
    code, out, err = cli("inventory", path, *small)
    assert out.startswith("l8-fp8 on dgx-h100 (H100 80GB SXM; 8 GPUs, 8 a node): 1.49 B"), out
    # a run's own scenario.yaml gives every figure (preset: none): the GPU is named alone
    code, out, err = cli("run", tmp_path / "b200" / "scenario.yaml", "--out", tmp_path / "again")
    assert out.startswith("l8-fp8 on B200 (16 GPUs, 8 a node): "), out


def test_hbf_on_a_machine_without_it_is_told_where_hbf_is_not_pointed_at_hbm(cli, tmp_path):
    """`placement.optimizer: hbf` on dgx-h100 (someone comparing HBF against host memory) was
    told "did you mean 'hbm'?": the GPU's memory, the opposite of an offload. A tier name a
    shipped machine has is no misspelling: the message says which machines have it."""
    path = tmp_path / "l8.yaml"
    path.write_text(FP8_8B)
    code, _, err = cli("validate", path, "--set", "placement.optimizer=hbf")
    assert code == 2, err
    assert (
        "placement.optimizer: tier 'hbf' does not exist on this machine (tiers: hbm, dram, nvme; "
        "hardware.preset h200-hbf or h200-hbf-8stack has one, or give hardware.tiers.hbf)"
    ) in err
    assert "did you mean" not in err
    code, _, err = cli("validate", path, "--set", "placement.optimizer=cpu")  # a word: as before
    assert code == 2 and "did you mean 'dram' (host memory)?" in err, err


L70_OFFLOAD = """name: l70-off
model: {preset: llama-3-70b}
training: {micro_batch_size: 1, global_batch_size: 512, seq_len: 8192, optimizer: adamw,
           recompute: selective, attention_kernel: flash, fp8: {recipe: delayed}}
parallel: {data: 8, tensor: 8, sequence: true, zero_stage: 1}
placement: {master: dram, optimizer: dram, optimizer_compute: cpu}
hardware: {preset: dgx-h100}
"""
H200_ON_DGX_H100 = (
    "hardware.gpu.name=H200 SXM",
    "hardware.gpu.kernels=h200-sxm",
    "hardware.tiers.hbm.capacity=143155 MiB",
    "hardware.tiers.hbm.bandwidth=4.8 TB/s",
)


def test_scenarios_md_h200_on_a_dgx_h100_host_figures(cli, tmp_path):
    """docs/scenarios.md's way to an H200 without HBF (no preset is one), and its figures."""
    doc = " ".join((ROOT / "docs" / "scenarios.md").read_text().split())
    path = tmp_path / "l70.yaml"
    path.write_text(L70_OFFLOAD)
    given = "hardware: {preset: dgx-h100, gpu: {name: H200 SXM, kernels: h200-sxm}, tiers: {hbm:"
    assert given + " {capacity: 143155 MiB, bandwidth: 4.8 TB/s}}}" in doc

    def step(*sets: str) -> dict:
        flags = [a for s in sets for a in ("--set", s)]
        code, out, err = cli("run", path, *flags, "--out", tmp_path / "r", "--format", "json")
        assert code == 0, err
        return json.loads(out)["step"]

    h100, h200, hbf = step(), step(*H200_ON_DGX_H100), step("hardware.preset=h200-hbf")
    said = (
        f"{h100['time_s']:.3f} s a step on `dgx-h100`, {h200['time_s']:.3f} s so and "
        f"{hbf['time_s']:.3f} s on `h200-hbf`: "
        f"{100 * (1 - h200['time_s'] / h100['time_s']):.1f} % shorter, "
        f"{h100['breakdown']['memory_bound_s'] - h200['breakdown']['memory_bound_s']:.3f} s of it "
        f"the memory-bound kernels and "
        f"{h100['breakdown']['gemm_s'] - h200['breakdown']['gemm_s']:.3f} s the GEMMs; "
        f"the CPU update's {h100['exposed_cpu_s']:.3f} s is the same on both hosts"
    )
    assert said in doc, said
    same = pytest.approx(h100["exposed_cpu_s"], rel=1e-9)  # the same CPU rate: float noise
    assert h200["exposed_cpu_s"] == same and hbf["exposed_cpu_s"] == same


PRICED_PLAN = FP8_8B.replace("{preset: dgx-h100}", "{preset: dgx-h100, price_per_gpu_hour: 3}")


def test_one_gpu_hour_price_for_two_gpus_is_said(cli, tmp_path):
    """A cost plan over hardware.preset, and a compare of dgx-h100 against dgx-b200, priced a
    B200's GPU-hour as an H100's (the scenario's one price_per_gpu_hour) in silence: Llama 3
    8B at 3 an hour ranked dgx-b200 cheapest per token (0.04341 against 0.07029)."""
    from tiersim.config.load import load_scenario
    from tiersim.config.price_notes import PRICE, plan_price_note

    path = tmp_path / "l8.yaml"
    path.write_text(PRICED_PLAN + "plan: {hardware.preset: [dgx-h100, dgx-b200]}\n")
    note = plan_price_note(load_scenario(path).scenario)
    assert note is not None and (note.code, note.path) == ("W-ONE-PRICE", PRICE)
    assert note.message.startswith("3 an hour for every machine the plan searches (it varies")
    path.write_text(PRICED_PLAN + "plan: {placement.optimizer: [hbm, dram]}\n")  # one machine
    assert plan_price_note(load_scenario(path).scenario) is None
    path.write_text(PRICED_PLAN)
    small = ("--set", "model.layers=2", "--set", "training.attention_kernel=flash")
    b200 = ("--set", "hardware.preset=dgx-b200")
    code, out, err = cli("compare", path, *small, *b200)
    assert code == 0 and "B is cheaper per token" in out, err
    said = "3 an hour for both sides' GPUs (H100 80GB SXM, B200): the cost compares them at one"
    assert said in err and "[W-ONE-PRICE]" in err, err
    own = ("--set", "hardware.price_per_gpu_hour=6")  # B's own price: nothing to say
    code, out, err = cli("compare", path, *small, *b200, *own)
    assert code == 0 and "W-ONE-PRICE" not in err, err


def test_presets_table_gives_each_gpus_fp8_peak(cli):
    """Choosing a machine for an FP8 run, `tiersim presets` gave the 16-bit peak alone. The
    datasheets' dense FP8 peaks (the preset files cite them): H100 and H200 SXM 1,979 TFLOP/s,
    B200 4,500; A100 and V100 have no FP8 tensor cores ('-', as training.fp8 refuses them)."""
    code, out, err = cli("presets")
    assert code == 0, err
    lines = out.splitlines()
    (head,) = [ln for ln in lines if ln.startswith("hardware preset") and "GPU" in ln]
    column = re.split(r"\s{2,}", head.strip()).index("FP8 peak")
    rows = {ln.split()[0]: re.split(r"\s{2,}", ln.strip()) for ln in lines if "TFLOP/s" in ln}
    want = {"dgx-h100": "1,979 TFLOP/s", "h200-hbf": "1,979 TFLOP/s", "dgx-b200": "4,500 TFLOP/s"}
    want |= {"dgx-a100": "-", "dgx2": "-"}
    assert {name: rows[name][column] for name in want} == want


def test_compare_names_the_default_attention_kernel_it_ran(cli, tmp_path):
    """`compare` of a scenario with no attention_kernel against `--set
    training.attention_kernel=flash` listed the input as `-` against `flash`: A ran
    Megatron's eager attention, which the table hid. A kernel named as the default it already
    was is no input that differs."""
    path = tmp_path / "l8.yaml"  # two layers: both sides (B is A --set ...)
    path.write_text(FP8_8B.replace("{preset: llama-3-8b}", "{preset: llama-3-8b, layers: 2}"))
    code, out, err = cli("compare", path, "--set", "training.attention_kernel=flash")
    assert code == 0, err
    (row,) = [ln for ln in out.splitlines() if ln.startswith("training.attention_kernel")]
    assert row.split() == ["training.attention_kernel", "eager", "flash"]
    code, out, err = cli("compare", path, "--set", "training.attention_kernel=eager")
    assert code == 0 and "0 inputs differ" in out, out
