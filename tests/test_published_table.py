"""check-published's table and JSON: each row's parts add up to its predicted figure.

The model's prices of the step (step.breakdown) leave out the optimizer's part of the step and
the waits no price covers; the table shows both, so that GEMM s to other s sum to the row's
predicted time. A row compared on the optimizer's time (ZeRO-Offload Table 4) is that time
alone: the step's prices say nothing of it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SCENARIOS

from tiersim.cli.commands.check_published import as_json, compare_all, table
from tiersim.config.load import load_scenario
from tiersim.groundtruth.published import REFERENCES, Comparison, Reference, summarize
from tiersim.runner import simulate

HEAD = [
    "scenario",
    "predicted s",
    "published s",
    "error",
    "GEMM s",
    "memory s",
    "calib. s",  # parallel.pipeline_engine_overhead, a calibration (not a framework's)
    "collect. s",
    "bubble s",
    "imbal. s",
    "optim. s",
    "other s",
]
# powers of two: every sum below is exact in floating point
PRICES = {
    "gemm_s": 1.0,
    "memory_bound_s": 0.25,
    "framework_s": 0.5,
    "collectives_s": 0.125,
    "bubble_s": 0.0625,
    "imbalance_s": 0.03125,
}


def _runs() -> list[Comparison]:
    step = Reference(Path("step.yaml"), 3.0, "s", derived=False)
    adam = Reference(Path("adam.yaml"), 1.0, "s", derived=False, metric="optimizer_s")
    return [
        # a 3 s step with a 0.5 s GPU optimizer step
        Comparison(step, 3.0, PRICES, step_s=3.0, optimizer_in_step_s=0.5),
        # the optimizer's 1.1 s, from a 6 s step
        Comparison(adam, 1.1, PRICES, step_s=6.0, optimizer_in_step_s=1.1),
    ]


def _rows(text: str) -> dict[str, list[str]]:
    head, _, rest = text.partition("\n\n")[0].split("\n", 2)
    assert _cells(head) == HEAD
    return {cells[0]: cells[1:] for cells in map(_cells, rest.splitlines())}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("  ") if c.strip()]


def test_a_step_row_shows_every_part_and_adds_up_to_its_prediction():
    runs = _runs()
    rows = _rows(table(runs, summarize(runs)))
    # other = 3 - (1 + 0.25 + 0.5 + 0.125 + 0.0625 + 0.03125 + 0.5) = 3 - 2.46875 = 0.53125
    assert rows["step"] == [
        "3.000",
        "3.000",
        "+0.0%",
        "1.000",
        "0.2500",
        "0.5000",  # framework overhead, which the table used to leave out
        "0.1250",
        "0.06250",
        "0.03125",
        "0.5000",
        "0.5312",
    ]


def test_an_optimizer_row_is_the_optimizer_time_not_the_steps_prices():
    runs = _runs()
    rows = _rows(table(runs, summarize(runs)))
    # 1.1 / 1.0 - 1 = +10 %; the step's GEMM (1.000) is no part of the optimizer's time
    assert rows["adam"] == ["1.100", "1.000+", "+10.0%", *["-"] * 6, "1.100", "-"]


def test_the_json_gives_each_runs_parts_and_metric():
    runs = _runs()
    got = {r["scenario"]: r for r in json.loads(as_json(runs, summarize(runs)))["runs"]}
    assert got["step"]["metric"] == "time_s"
    assert got["step"]["parts"] == {**PRICES, "optimizer_s": 0.5, "other_s": 0.53125}
    assert got["adam"]["metric"] == "optimizer_s"
    assert got["adam"]["parts"] == {"optimizer_s": 1.1}


def test_a_run_without_prices_shows_no_parts():
    ref = Reference(Path("bare.yaml"), 2.0, "s", derived=False)
    runs = [Comparison(ref, 2.0)]
    rows = _rows(table(runs, summarize(runs)))
    assert rows["bare"][3:] == ["-"] * 8


@pytest.mark.parametrize(
    ("name", "on_gpu"),
    [("korthikanti2022-22b-full-recompute", True), ("ma2025-qwen2.5-3b-zero-offload", False)],
)
def test_published_runs_parts_add_up_to_the_simulated_step(tmp_path, name, on_gpu):
    published = SCENARIOS / "published"
    shutil.copy(published / f"{name}.yaml", tmp_path)
    entry = "{iteration_time_s: 1, derived: false, source: s}"
    (tmp_path / REFERENCES).write_text(f"{name}.yaml: {entry}\n")
    (c,) = compare_all(tmp_path)
    result = simulate(load_scenario(published / f"{name}.yaml").scenario)
    parts = c.parts()
    assert sum(parts.values()) == pytest.approx(result.time_s, rel=1e-9)
    # the optimizer's part of the step: the GPU optimizer's own step (Megatron), or the time
    # the GPU waits on the CPU's (ZeRO-Offload), which the step's prices do not hold
    wanted = result.optimizer_s if on_gpu else result.exposed_cpu_s
    assert parts["optimizer_s"] == wanted > 0
    assert parts["other_s"] >= 0
