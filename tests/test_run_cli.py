"""`tiersim run` end to end on every shipped scenario: report contents, files, trace."""

import json
from pathlib import Path

import pytest
from golden_cases import Case
from problem_lines import said

from tiersim.cli import main
from tiersim.core.units import fmt_time

SCENARIOS_DIR = Path(__file__).resolve().parent.parent / "scenarios"
SCENARIOS = sorted(SCENARIOS_DIR.glob("*.yaml"))
REPORT_KEYS = {
    "scenario",
    "tiersim_version",
    "model",
    "inventory",
    "tiers",
    "step",
    "links",
    "wear",
    "checkpoint",
    "sim",
}
STEP_KEYS = {
    "time_s",
    "compute_s",
    "recompute_s",
    "optimizer_s",
    "exposed_transfer_s",
    "exposed_collective_s",
    "overlap",
    "tokens_per_s",
}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_runs(path, shipped_run):
    # `tiersim run PATH --format json --out FOLDER`, the run test_golden compares (one a session)
    code, out, folder = shipped_run(Case(path.stem, path))
    assert code == 0
    printed = json.loads(out)
    saved = json.loads((folder / "report.json").read_text())
    assert printed == saved
    assert set(saved) >= REPORT_KEYS
    assert set(saved["step"]) >= STEP_KEYS
    step = saved["step"]
    assert step["time_s"] > 0
    assert step["compute_s"] <= step["time_s"] * (1 + 1e-9)
    assert step["exposed_transfer_s"] <= step["time_s"]
    for tier in saved["tiers"].values():
        assert {"capacity_bytes", "resident_bytes", "peak_bytes", "fits"} <= set(tier)
        assert tier["peak_bytes"] >= tier["resident_bytes"]
    assert (folder / "scenario.yaml").exists()


def test_two_runs_of_a_scenario_write_byte_identical_reports(tmp_path, capsys):
    # a checkpointed run (three engine runs) with a trace: nothing of the machine's timing
    # gets into report.json; the table says the engine time, as a measurement
    path = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"
    for name in ("a", "b"):
        args = ["run", str(path), "--out", str(tmp_path / name), "--trace"]
        assert main(args) == 0
        table = capsys.readouterr().out
        assert "of engine time (measured)." in table
    first = (tmp_path / "a" / "report.json").read_bytes()
    assert first == (tmp_path / "b" / "report.json").read_bytes()
    assert b"wall_s" not in first


def test_trace_is_chrome_trace_event_format(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    args = ["run", str(scenario), "--out", str(tmp_path), "--trace", str(trace)]
    assert main(args) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    phases = {e["ph"] for e in events}
    assert {"M", "X", "C"} <= phases
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and "pid" in e and "tid" in e for e in complete)
    named = ("process_name", "thread_name")
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] in named}
    assert {"GPU", "compute"} <= names
    assert "step time" in capsys.readouterr().out


def test_trace_without_a_file_goes_into_the_results_folder(tmp_path, capsys):
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out), "--trace"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "scenario.yaml", "trace.json"]
    assert json.loads((out / "trace.json").read_text())["traceEvents"]


def test_a_trace_in_a_folder_that_does_not_exist_is_refused_not_made(tmp_path, capsys):
    # a mistyped folder is not made (as calibrate --out's); the results folder itself is
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    trace = tmp_path / "typo" / "trace.json"
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out), "--trace", str(trace)]) == 2
    why = f"its folder {trace.parent} does not exist (expected a file path in an existing folder)"
    assert f"--trace: {trace}: {why}" in capsys.readouterr().err
    assert not trace.parent.exists() and not out.exists()  # refused before anything ran
    inside = out / "trace.json"  # a file path in the results folder: made with it
    assert main(["run", str(scenario), "--out", str(out), "--trace", str(inside)]) == 0
    assert json.loads(inside.read_text())["traceEvents"]


def test_trace_shows_collectives_and_the_bubble(tmp_path):
    # tensor (blocking the GPU), data (overlapped) and pipeline (bubble) parallelism together
    trace = tmp_path / "trace.json"
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "gpt3-175b-tp-pp.yaml"
    args = ["run", str(scenario), "--out", str(tmp_path), "--trace", str(trace)]
    assert main(args) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "waiting", "nvlink tensor"} <= tracks
    assert any(name.endswith(" data") for name in tracks)
    bubble = [e for e in events if e.get("cat") == "bubble"]
    assert bubble and all(e["dur"] > 0 for e in bubble)


def test_infeasible_working_set_exits_3(tmp_path, capsys):
    scenario = tmp_path / "huge.yaml"
    scenario.write_text(
        "name: huge\nmodel: {preset: gpt3-175b}\ntraining: {seq_len: 2048, micro_batch_size: 512}\n"
    )
    assert main(["run", str(scenario), "--out", str(tmp_path)]) == 3
    assert "cannot hold even one layer" in capsys.readouterr().err


def test_placement_without_a_route_exits_2_naming_the_file_and_key(tmp_path, capsys):
    # DRAM exists but no link joins it to HBM: optimizer state homed there cannot reach the
    # GPU's optimizer.
    scenario = tmp_path / "island.yaml"
    scenario.write_text(
        "name: island\nmodel: {preset: gpt2}\nplacement: {optimizer: dram}\n"
        "hardware:\n  preset: none\n  gpu: {peak_flops: {bf16: 100 TFLOP/s}}\n"
        "  tiers:\n    hbm: {kind: hbm, capacity: 80 GB, bandwidth: 2 TB/s}\n"
        "    dram: {kind: dram, capacity: 1 TB, bandwidth: 100 GB/s}\n"
    )
    for command in ("run", "validate"):
        assert main([command, str(scenario)]) == 2
        err = capsys.readouterr().err
        assert said(err.strip(), scenario).coded == ("E-ROUTE", "placement.optimizer")
        assert "'dram'" in err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "sets"),
    [
        ("gpt3-175b-tp-pp.yaml", []),  # with a pipeline bubble
        ("default.yaml", ["--set", "placement.optimizer_compute=cpu"]),  # optimizer beside
    ],
)
def test_step_table_shares_add_up_to_the_step(tmp_path, capsys, name, sets):
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / name
    assert main(["run", str(scenario), "--out", str(tmp_path), *sets]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()[3:]  # rows after the rule
    note = "exposed CPU work is longer than"  # a line under the table, where it applies
    shares = [
        float(line.rsplit(None, 2)[-2])
        for line in table
        if not line.startswith(("step time", "  of which", note)) and not line.endswith("-")
    ]
    # each share is rounded to 0.1 %: the parts are 100 % within half that per row
    assert sum(shares) == pytest.approx(100.0, abs=0.05 * len(shares) + 1e-9)


def test_checkpoint_line_says_when_no_failure_rate_is_set(tmp_path, capsys):
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"
    assert main(["run", str(scenario), "--out", str(tmp_path)]) == 0
    stalls_only = json.loads((tmp_path / "report.json").read_text())["checkpoint"]["goodput"]
    assert (
        "no failure rate set (failures.mtbf or failures.gpu_mtbf): "
        f"goodput {100 * stalls_only:.4g} % counts stalls"
        " only" in capsys.readouterr().out
    )
    sets = ["--set", "failures.mtbf=1 h"]
    assert main(["run", str(scenario), "--out", str(tmp_path), *sets]) == 0
    out = capsys.readouterr().out
    assert "goodput" in out and "job MTBF 60.0 min" in out and "Daly's optimum" in out


def test_a_run_too_large_to_be_meant_exits_3_before_building_it(tmp_path, capsys):
    # seed-1b-adam: 24 layers + the rest unit, 1 micro-batch; the synchronous update makes
    # steps independent, so one step: 1 x 1 x 25 = 25 layer passes, over a limit of 24; at 25
    # it runs. With a pipelined update, warm-up + 2 steps: 3 x 1 x 25 = 75
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    args = ["run", str(scenario), "--out", str(tmp_path), "--set"]
    assert main([*args, "simulation.max_layer_passes=24"]) == 3
    err = capsys.readouterr().err
    assert "25 layer passes (1 step x 1 micro-batch x 25 units)" in err
    assert main([*args, "simulation.max_layer_passes=25"]) == 0
    pipelined = [*args, "training.optimizer_step=pipelined", "--set"]
    assert main([*pipelined, "simulation.max_layer_passes=74"]) == 3
    assert "75 layer passes (3 steps x 1 micro-batch x 25 units)" in capsys.readouterr().err
    assert main([*pipelined, "simulation.max_layer_passes=75"]) == 0


def test_far_too_many_layers_are_refused_before_the_workload_is_built(
    tmp_path, capsys, monkeypatch
):
    # 100,000,000 layers + the rest unit: one step of one micro-batch is already 100,000,001
    # layer passes, over the default 1,000,000; building the workload (linear in the layers)
    # would take minutes first, so it must never be reached
    from tiersim.engine import simulate as engine_simulate

    def never(*_args, **_kwargs):
        raise AssertionError("the workload was built before the size check")

    monkeypatch.setattr(engine_simulate, "prepare", never)
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"
    args = ["run", str(scenario), "--out", str(tmp_path), "--set", "model.layers=100000000"]
    assert main(args) == 3
    assert "100,000,001 layer passes (1 step x 1 micro-batch" in capsys.readouterr().err


def test_links_report_their_bandwidth_and_the_nics_a_gpu_drives(tmp_path, capsys):
    # h200-hbf: PCIe 50 GB/s per direction; NVLink 450 GB/s; one 400 Gb/s (50 GB/s) NIC per
    # GPU, 8 GPUs a node. A data group of 16 consecutive ranks (tensor 1) has 8 members in
    # each of 2 nodes: its rings drive 8 NICs, min(450, 8 x 50) = 400 GB/s per GPU.
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: nics\nmodel: {preset: gpt2}\nparallel: {data: 16}\nhardware: {preset: h200-hbf}\n"
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out
    assert "network    400.00 GB/s" in table
    assert "a group with 8 GPUs in each node drives 8 NICs at once" in table
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    links = report["links"]
    assert links["pcie"]["bandwidth_per_direction"] == 50e9
    assert links["network"]["bandwidth_per_direction"] == 400e9
    assert links["network"]["nics_per_gpu"] == 8
    # 800 Gb/s NICs: 8 x 100 GB/s = 800 GB/s, capped at NVLink's 450 GB/s
    args = ["--set", "hardware.network.inter_node_bandwidth=800 Gb/s"]
    assert main(["run", str(scenario), "--out", str(tmp_path / "fast"), *args]) == 0
    table = capsys.readouterr().out
    assert "8 x 100.00 GB/s, capped at the NVLink's 450.00 GB/s" in table
    links = json.loads((tmp_path / "fast" / "report.json").read_text())["links"]
    assert links["network"]["bandwidth_per_direction"] == 450e9
    assert links["network"]["nics_per_gpu"] == 8 and links["network"]["nic_bandwidth"] == 100e9


@pytest.mark.parametrize(
    ("trace", "why"),
    [
        ("s.scenario", "is one of the run's input files"),
        ("preset.yaml", "is a YAML path: a trace is JSON"),
        ("out/report.json", "is this run's results folder or one of its results"),
        ("out", "is this run's results folder or one of its results"),
        ("-", "not standard output"),
        ("a-folder", "exists and is not a plain file"),
    ],
)
def test_a_trace_path_that_would_overwrite_something_is_refused(tmp_path, capsys, trace, why):
    text = (Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml").read_text()
    scenario = tmp_path / "s.scenario"  # any name: the file is YAML whatever it is called
    scenario.write_text(text)
    (tmp_path / "preset.yaml").write_text("kept")
    (tmp_path / "a-folder").mkdir()
    target = trace if trace == "-" else str(tmp_path / trace)
    args = ["run", str(scenario), "--out", str(tmp_path / "out"), "--trace", target]
    assert main(args) == 2
    assert why in capsys.readouterr().err
    assert scenario.read_text() == text and (tmp_path / "preset.yaml").read_text() == "kept"
    assert not (tmp_path / "out").exists()  # refused before running


def test_a_trace_over_the_models_config_json_is_refused(tmp_path, capsys):
    config = Path(__file__).resolve().parent / "fixtures" / "gpt2.config.json"
    (tmp_path / "config.json").write_text(config.read_text())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nmodel: {hf_config: config.json}\ntraining: {seq_len: 128}\n"
        "hardware: {preset: h200-hbf}\n"
    )
    args = ["run", str(scenario), "--out", str(tmp_path / "out"), "--trace"]
    assert main([*args, str(tmp_path / "config.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert said(err, "--trace").coded == ("E-RESULTS", str(tmp_path / "config.json"))
    assert (tmp_path / "config.json").read_text() == config.read_text()
    # hf_config naming the model's folder: its config.json is the input
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(config.read_text())
    scenario.write_text(
        "name: s\nmodel: {hf_config: m}\ntraining: {seq_len: 128}\nhardware: {preset: h200-hbf}\n"
    )
    assert main([*args, str(tmp_path / "m" / "config.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert said(err, "--trace").coded == ("E-RESULTS", str(tmp_path / "m" / "config.json"))
    assert (tmp_path / "m" / "config.json").read_text() == config.read_text()


def test_results_never_replace_the_users_scenario_but_rerun_their_own(tmp_path, capsys):
    text = (Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml").read_text()
    scenario = tmp_path / "scenario.yaml"  # the user's file, where --out would write its own
    scenario.write_text(text)
    assert main(["run", str(scenario), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert said(err.strip(), "--out").coded == ("E-RESULTS", str(tmp_path))
    assert "scenario.yaml" in err
    assert scenario.read_text() == text and not (tmp_path / "report.json").exists()
    # the scenario.yaml a run wrote reruns in its own folder (written again, whole)
    assert main(["run", str(scenario), "--out", str(tmp_path / "r")]) == 0
    written = tmp_path / "r" / "scenario.yaml"
    assert main(["run", str(written), "--out", str(tmp_path / "r")]) == 0
    assert written.read_text().startswith("# The scenario as tiersim ")
    capsys.readouterr()


def test_the_headline_gives_tokens_per_second_after_goodput_when_failures_are_set(tmp_path, capsys):
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    sets = ["--set", "failures.mtbf=10 min", "--set", "checkpoint.every_steps=1000"]
    assert main(["run", str(scenario), "--out", str(tmp_path), *sets]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    report = json.loads((tmp_path / "report.json").read_text())
    tokens, goodput = report["step"]["tokens_per_s"], report["checkpoint"]["goodput"]
    assert 0 < goodput < 1
    # with its unit, beside the figure it scales (not after the MFU's parenthesis)
    assert (
        f"{tokens:,.0f} tokens/s over all the job's GPUs ({tokens * goodput:,.0f} tokens/s after "
        f"checkpoints and failures: goodput {100 * goodput:.2f} %), " in head
    )


def test_run_lists_wear_verdicts_in_the_order_tiersim_wear_does(tmp_path, capsys):
    # hbf-optimizer-state: HBF fails its budget, NVMe (checkpoints) has none; the hardware lists
    # NVMe first, both commands put the failed budget first. On 8 of its 80 layers (the same
    # verdicts): each command simulates HBF's grad-accumulation remedy, 2 s of CPU on 80 layers
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "hbf-optimizer-state.yaml"
    fewer = ["--set", "model.layers=8"]
    assert main(["run", str(scenario), "--out", str(tmp_path), *fewer]) == 0
    run_lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith(("HBF", "NVMe"))]
    assert main(["wear", str(scenario), *fewer]) == 0
    wear_lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith(("HBF", "NVMe"))]
    assert (
        [x.split()[0] for x in run_lines] == ["HBF", "NVMe"] == [x.split()[0] for x in wear_lines]
    )
    assert run_lines == wear_lines


def test_an_optimum_under_the_drain_is_said_as_such(tmp_path, capsys):
    # a 1-minute MTBF and an async checkpoint stalling ~1 ms: Daly's optimum is well under one
    # step, but the next snapshot must wait for the 18.7 s drain, so the interval is raised
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "hbf-optimizer-state.yaml"
    sets = ["failures.mtbf=1 min", "failures.gpu_mtbf=null", "failures.gpus=null"]
    # and an NVMe budget that cannot bind: its rated 14.02 PB written allowed in one day; HBF's
    # held too (a day), so that no wear remedy is simulated (2 s of CPU; not read here)
    sets += ["training.grad_accumulation=2", "budget.nvme.lifetime=1 day"]
    sets += ["budget.hbf.lifetime=1 day"]
    args = ["run", str(scenario), "--out", str(tmp_path)] + [a for s in sets for a in ("--set", s)]
    assert main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Checkpoint"))
    ck = json.loads((tmp_path / "report.json").read_text())["checkpoint"]
    step_s = json.loads((tmp_path / "report.json").read_text())["step"]["time_s"]
    n, optimum_s = ck["optimal_interval_steps"]["daly"], ck["optimal_interval_s"]["daly"]
    assert ck["interval_basis"] == "drain" and optimum_s < step_s < n * step_s
    assert "auto: the drain, longer than Daly's optimum" in line
    # the drain sets it; where the checkpoint stalls nothing, Daly's optimum is 0 s of work
    drained = "is under the drain" if optimum_s > 0 else "Daly's optimum is the drain's"
    assert f"{drained}: every {n} steps" in line
    assert f"{n} steps: {100 * ck['goodput_at_optimum']:.2f} %" in line


def test_a_run_that_does_not_fit_says_so_in_its_headline(tmp_path, capsys):
    # Llama 2 70B (68,976,648,192 params) on one GPU, AdamW with fp32 master and moments:
    # 16 B/param = 1.10 TB resident in HBM alone, against the preset's 150.11 GB (139.80 GiB).
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nmodel: {preset: llama-2-70b}\ntraining: {seq_len: 4096}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] is False and report["tiers"]["hbm"]["fits"] is False
    assert report["tiers"]["hbm"]["resident_bytes"] >= 16 * 68_976_648_192
    assert main(["run", str(path), "--out", str(tmp_path / "b")]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert head[1].startswith("DOES NOT FIT: hbm ") and "of 150.11 GB" in head[1]


def test_the_sequence_length_is_reported_and_said_when_defaulted(tmp_path, capsys):
    # gpt2 has 1,024 learned positions: with no training.seq_len, sequences are 1,024 tokens
    path = tmp_path / "g.yaml"
    path.write_text("name: g\nmodel: {preset: gpt2}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--format", "json"]) == 0
    step = json.loads(capsys.readouterr().out)["step"]
    assert (step["seq_len"], step["seq_len_from"]) == (1024, "model.max_positions")
    assert step["tokens_per_step"] == 1024  # micro-batch 1, one micro-batch, one GPU
    assert "seq_len: 1024" in (tmp_path / "a" / "scenario.yaml").read_text()
    assert main(["run", str(path), "--out", str(tmp_path / "b")]) == 0
    second = capsys.readouterr().out.splitlines()[1]
    assert second == (
        "sequences of 1,024 tokens: the model's max_positions, as training.seq_len is not set"
    )
    path.write_text("name: g\nmodel: {preset: gpt2}\ntraining: {seq_len: 512}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "c")]) == 0
    assert "sequences of" not in capsys.readouterr().out
    sets = ["--set", "training.optimizer_step=pipelined"]
    assert main(["run", str(path), "--out", str(tmp_path / "d"), *sets]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("optimizer step pipelined: ")


def test_run_says_where_it_wrote(tmp_path, cli):
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
    out, trace = tmp_path / "out", tmp_path / "t.json"
    code, stdout, stderr = cli("run", scenario, "--out", out, "--trace", trace)
    assert code == 0, stderr
    assert stdout.endswith(f"\n\nresults: {out}/scenario.yaml, {out}/report.json, {trace}\n")
    code, stdout, stderr = cli("run", scenario, "--out", out, "--format", "json")
    assert code == 0, stderr
    json.loads(stdout)  # standard output stays the report alone; the files go to stderr
    assert stderr == f"results: {out}/scenario.yaml, {out}/report.json\n"


def test_headline_says_when_no_link_carried_a_transfer(tmp_path, cli):
    # GPT-2 on one GPU, every class in HBM by default: no link is busy in the step, so there
    # is no overlap share to give (the headline said "overlapped with compute -")
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\n")
    code, out, err = cli("run", path, "--out", tmp_path / "out")
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["step"]["overlap"] is None
    assert " tokens/s over all the job's GPUs, " in out.splitlines()[0]
    assert out.splitlines()[0].endswith(" %), no link carried a transfer")
    code, out, err = cli("run", SCENARIOS[0], "--out", tmp_path / "default")
    assert "transfer overlapped with compute " in out.splitlines()[0]


def test_table_says_when_no_checkpoint_is_modelled(tmp_path, cli):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\n")  # checkpoint.every_steps: null
    code, out, err = cli("run", path, "--out", tmp_path / "out")
    assert code == 0, err
    assert "No checkpoint modelled (checkpoint.every_steps unset)" in out
    with_one = tmp_path / "y.yaml"
    with_one.write_text(path.read_text() + "checkpoint: {every_steps: 100, target: dram}\n")
    code, out, err = cli("run", with_one, "--out", tmp_path / "out2")
    assert code == 0, err
    assert "No checkpoint modelled" not in out and "Checkpoint (blocking to dram" in out


def test_prices_table_adds_up_to_the_step(tmp_path, cli):
    # GPT-3 175B on TP x PP x DP: the data-parallel reduction's exposed tail is in no price
    code, out, err = cli("run", SCENARIOS_DIR / "gpt3-175b-tp-pp.yaml", "--out", tmp_path / "o")
    assert code == 0, err
    st = json.loads((tmp_path / "o" / "report.json").read_text())["step"]
    priced = sum(st["breakdown"].values()) + st["optimizer_s"]
    rest = st["time_s"] - priced
    assert rest > 0.01 * st["time_s"]
    row = next(line for line in out.splitlines() if line.startswith("exposed waits (not priced)"))
    assert fmt_time(rest) in row


def test_run_refuses_a_sweeps_results_folder(tmp_path, cli):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\nhardware: {preset: h200-hbf}\n")
    sweep_out = tmp_path / "sweep"
    sweep_out.mkdir()
    (sweep_out / "results.jsonl").write_text("")
    code, _, err = cli("run", path, "--out", sweep_out)
    assert code == 2 and said(err.strip(), "--out").coded == ("E-RESULTS", str(sweep_out))
    assert not (sweep_out / "report.json").exists()


def test_run_refuses_the_points_and_plots_folders_of_a_sweep(tmp_path, cli):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\nhardware: {preset: h200-hbf}\n")
    sweep_out = tmp_path / "sweep"
    (sweep_out / "points").mkdir(parents=True)
    (sweep_out / "results.jsonl").write_text("")
    for inside, part in (
        ("points", "points"),
        ("plots/x", "plots"),
        ("points/../points", "points"),
    ):
        code, _, err = cli("run", path, "--out", sweep_out / inside)
        assert code == 2, err
        assert said(err.strip(), "--out").coded == ("E-RESULTS", str(sweep_out / inside))
        assert f" {part}/ " in err and str(sweep_out.resolve()) in err
    assert not (sweep_out / "points" / "report.json").exists()
    assert not (sweep_out / "plots").exists()  # refused before the folder was made
    # beside the sweep's own folders, a run's results disturb nothing of it
    code, _, err = cli("run", path, "--out", sweep_out / "runs" / "x")
    assert code == 0, err
    assert (sweep_out / "runs" / "x" / "report.json").exists()


def test_run_writes_no_trace_among_a_sweeps_points(tmp_path, cli):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\nhardware: {preset: h200-hbf}\n")
    sweep_out = tmp_path / "sweep"
    (sweep_out / "points").mkdir(parents=True)
    (sweep_out / "results.jsonl").write_text("")
    trace = sweep_out / "points" / "0123456789abcdef.json"  # a point's report's name
    code, _, err = cli("run", path, "--out", tmp_path / "r", "--trace", trace)
    assert code == 2, err
    assert said(err.strip(), "--trace").coded == ("E-RESULTS", str(trace))
    assert str(sweep_out / "points") in err
    assert not trace.exists()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_empty_out_is_refused_not_taken_for_the_default_folder(
    tmp_path, capsys, monkeypatch, command
):
    monkeypatch.chdir(tmp_path)  # where the default results/<name>/ would go
    root = Path(__file__).resolve().parent.parent / "scenarios"
    path = root / ("default.yaml" if command == "run" else "sweeps/hbf-wear.yaml")
    assert path.is_file()
    with pytest.raises(SystemExit) as stop:
        main([command, str(path), "--out", " "])
    assert stop.value.code == 2
    assert "argument --out: expected a folder path (got an empty one)" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_an_out_that_is_a_device_is_not_a_folder_not_a_file(cli):
    # the review's: --out /dev/null was called "is a file"; it is a character device
    from conftest import SCENARIOS

    code, out, err = cli("run", SCENARIOS / "default.yaml", "--out", "/dev/null")
    assert (code, out) == (2, "")
    assert said(err.strip(), "--out").coded == ("E-RESULTS", "/dev/null")
    assert "is not a folder" in err and "a file" not in err
