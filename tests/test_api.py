"""The public Python API (tiersim/__init__.py): every name in __all__ is there and works."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

import tiersim

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"


def test_every_public_name_resolves():
    assert set(tiersim.__all__) >= {
        "load_scenario",
        "inventory",
        "simulate",
        "report_for",
        "StepResult",
        "Inventory",
        "InputError",
        "InfeasibleError",
    }
    for name in tiersim.__all__:
        assert getattr(tiersim, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        tiersim.simulat  # noqa: B018


def test_load_inventory_simulate_report():
    loaded = tiersim.load_scenario(SCENARIO, ["training.grad_accumulation=2"])
    assert isinstance(loaded, tiersim.Loaded)
    inv = tiersim.inventory(loaded.scenario)
    assert isinstance(inv, tiersim.Inventory)
    # the design brief's 16 GB example: 1e9 parameters x (2 + 2 + 4 + 8) bytes, no workspace
    per_parameter = inv.per_gpu["weights"] + inv.per_gpu["gradients"]
    per_parameter += inv.per_gpu["master"] + inv.per_gpu["optimizer"]
    assert per_parameter == 16 * inv.parameters
    result = tiersim.simulate(loaded.scenario)
    assert isinstance(result, tiersim.StepResult) and result.time_s > 0
    report = tiersim.report_for(loaded)
    assert report["step"]["time_s"] == result.time_s
    assert report["inventory"]["per_gpu"]["total"] == inv.per_gpu.total


def test_bad_input_is_an_input_error():
    with pytest.raises(tiersim.InputError) as caught:
        tiersim.load_scenario(SCENARIO, ["training.grad_accumulation=zero"])
    assert "training.grad_accumulation" in str(caught.value)


def test_simulate_leaves_the_garbage_collector_running():
    collections = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    scenario = tiersim.load_scenario(SCENARIO).scenario
    threshold = gc.get_threshold()
    gc.set_threshold(50)  # a collection every 50 allocations: a small run allocates thousands
    gc.callbacks.append(count)
    try:
        tiersim.simulate(scenario)
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
    assert gc.isenabled() and collections  # it collected during the run


def test_importing_tiersim_imports_nothing_heavy():
    code = "import sys, tiersim; print(sorted(m for m in sys.modules if m.startswith('tiersim')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tiersim']"


# --- tiersim.api: the whole job from a notebook ----------------------------------------------

FRAMEWORKS = Path(__file__).resolve().parent / "fixtures" / "frameworks"


def test_api_load_override_run_and_tables():
    from tiersim import api

    loaded = api.load(SCENARIO, {"training.grad_accumulation": 2})
    assert loaded.scenario.training.grad_accumulation == 2
    more = api.override(loaded, {"training.micro_batch_size": 2})
    assert (more.scenario.training.micro_batch_size, more.scenario.training.grad_accumulation) == (
        2,
        2,
    )  # the earlier override kept
    run = api.run(more)
    assert run.report == tiersim.report_for(more)  # the CLI's report, figure for figure
    row = run.table().to_pylist()[0]
    assert row["step.time_s"] == run.report["step"]["time_s"]
    tiers = {r["tier"]: r for r in run.tiers().to_pylist()}
    assert tiers["hbm"]["peak_bytes"] == run.report["tiers"]["hbm"]["peak_bytes"]
    assert run.links().num_rows == len(run.report["links"])
    inv = {r["class"]: r for r in api.inventory_table(more).to_pylist()}
    # 1e9 parameters, bf16 weights: 2 bytes each, on one GPU (no sharding)
    assert inv["weights"]["bytes_per_gpu"] == 2 * 1_000_000_000
    assert inv["optimizer"]["bytes_per_gpu"] == 8 * 1_000_000_000  # Adam: two fp32 moments


def test_api_build_from_a_mapping():
    from tiersim import api

    loaded = api.build(
        {
            "name": "tiny",
            "model": {"preset": "gpt2"},
            "training": {"micro_batch_size": 2, "global_batch_size": 16},
            "parallel": {"data": 4},
            "hardware": {"preset": "dgx-h100"},
        }
    )
    assert loaded.scenario.training.grad_accumulation == 16 // (2 * 4)
    with pytest.raises(tiersim.InputError, match=r"parallel\.data"):
        api.build({"name": "x", "model": {"preset": "gpt2"}, "hardware": {"preset": "dgx-h100"},
                   "parallel": {"data": "many"}})  # fmt: skip


def test_api_sweep_rows_and_figure():
    from tiersim import api

    loaded = api.load(SCENARIO)
    table = api.sweep(loaded, {"training.micro_batch_size": [1, 2], "training.seq_len": [512]})
    rows = table.to_pylist()
    assert [r["training.micro_batch_size"] for r in rows] == [1, 2]
    assert all(r["status"] == "ok" for r in rows)
    # tokens a step: micro x accumulation 1 x data 1 x 512 tokens
    per_step = [r["step.tokens_per_s"] * r["step.time_s"] for r in rows]
    assert per_step == pytest.approx([1 * 512, 2 * 512])
    # the same points on two worker processes give the same rows
    on_two = api.sweep(loaded, {"training.micro_batch_size": [1, 2], "training.seq_len": [512]}, 2)
    assert on_two.to_pylist() == rows
    bad = api.sweep(loaded, {"training.micro_batch_size": [0]}).to_pylist()[0]
    assert bad["status"] == "invalid" and "micro_batch_size" in bad["error"]
    fig = api.sweep_figure(table, "training.micro_batch_size", "step.time_s")
    assert fig.axes[0].get_ylabel() == "step.time_s"


def test_api_plan_best_and_emit(tmp_path):
    from tiersim import api

    path = tmp_path / "p.yaml"
    path.write_text(SCENARIO.read_text() + "\nplan:\n  training.recompute: [none, full]\n")
    planned = api.plan(path, workers=1, top=2)
    table = planned.table().to_pylist()
    assert table and table[0]["rank"] == 1
    best = planned.best()
    assert api.run(best).report["step"]["tokens_per_s"] == pytest.approx(table[0]["tokens_per_s"])
    text = api.emit(best, "deepspeed")
    assert '"train_micro_batch_size_per_gpu"' in text


def test_api_import_configs():
    from tiersim import api

    loaded = api.import_configs(FRAMEWORKS / "llama3_70b.toml", gpus=64, hardware="dgx-a100")
    assert loaded.scenario.parallel.tensor == 8 and loaded.scenario.model.preset == "llama-3-70b"


def test_inventory_table_has_the_gpu_gradients_row_of_zero1_with_the_cpu_optimizer():
    # DeepSpeed ZeRO-1, CPU optimizer, bf16, 10^9 parameters over data 4 (the CLI's row,
    # tests/test_review_2026_12_07_m2.py): the host's gradient partition 2 B x 10^9 / 4 = 5e8,
    # the whole bf16 gradients the GPU accumulates 2 B x 10^9 = 2e9 in hbm; the rows add up to
    # the per-GPU total 2e9 + 5e8 + 2e9 + 1e9 (master 4e9 / 4) + 2e9 (Adam 8e9 / 4) + 4e8 = 7.9e9
    from tiersim import api

    loaded = api.build(
        {
            "name": "z1",
            "model": {"parameters": 10**9, "layers": 4, "activation_bytes_per_layer": "100 MB"},
            "training": {"framework": "deepspeed", "workspace": "0 B", "precision": {
                "weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}},
            "parallel": {"data": 4, "zero_stage": 1},
            "placement": {"gradients": "dram", "master": "dram", "optimizer": "dram",
                          "optimizer_compute": "cpu"},
            "hardware": {"preset": "dgx-h100"},
        }
    )  # fmt: skip
    rows = api.inventory_table(loaded).to_pylist()
    assert [r["class"] for r in rows][:3] == ["weights", "gradients", "gradients (GPU)"]
    got = {r["class"]: (r["bytes_per_gpu"], r["home"]) for r in rows}
    assert got["gradients"] == (5 * 10**8, "dram")
    assert got["gradients (GPU)"] == (2 * 10**9, "hbm")
    assert sum(r["bytes_per_gpu"] for r in rows) == 79 * 10**8
    # without the CPU optimizer there is no such row (the GPU's gradients are the class's)
    plain = api.inventory_table(api.build({**loaded.resolved, "placement": {}})).to_pylist()
    assert "gradients (GPU)" not in {r["class"] for r in plain}
