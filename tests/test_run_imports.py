"""`tiersim run` imports nothing the command does not use (issue 36): the plan search's
modules only for a scenario with a `plan:` section, the sweep's never, a framework's mapping
only for overrides given as a mapping (the API's), the trace's only with --trace or --plot,
the plots' (and matplotlib, NumPy) only with --plot, the measurement's (PyTorch) never (its
command modules: tests/test_cli_lazy_commands.py). A run refused for its input exits before
the engine's and the report's modules are imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNUSED = (
    "tiersim.plan",
    "tiersim.sweep",
    "tiersim.frameworks",
    "tiersim.report.trace",
    "tiersim.report.plot",  # plot, plot_host, plot_memory, plot_timeline
    "tiersim.report.ranges_plot",
    "tiersim.groundtruth",
)
# what other commands or options use, each at least a few ms to import (all installed with
# tiersim's extras, so an import of any would be seen)
UNUSED_PACKAGES = ("matplotlib", "numpy", "torch", "dask", "distributed", "pyarrow", "psutil")

_PROBE = """
import contextlib, io, json, sys
from tiersim.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # argparse's own exits (--help)
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _imported(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_a_default_run_imports_only_what_it_uses(tmp_path):
    scenario = ROOT / "scenarios" / "default.yaml"
    got = _imported(["run", str(scenario), "--out", str(tmp_path), "--set", "parallel.data=4"])
    assert got["code"] == 0
    assert "tiersim.runner" in got["modules"]  # it ran
    unused = [m for m in got["modules"] if m.startswith(UNUSED)]
    assert unused == []
    packages = sorted({m.split(".")[0] for m in got["modules"]} & set(UNUSED_PACKAGES))
    assert packages == []
    assert "difflib" not in got["modules"]  # its close matches are for names refused


def test_a_run_refused_for_its_input_imports_no_engine_or_report_module(tmp_path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        "name: bad\nmodel: {preset: llama-2-7b}\nhardware: {preset: h200-hbf}\n"
        "training: {micro_batch_size: -1}\n"
    )
    got = _imported(["run", str(scenario), "--out", str(tmp_path / "out")])
    assert got["code"] == 2  # refused: exit 2 (the message itself: the message goldens)
    assert "tiersim.config.schema" in got["modules"]  # it was validated
    late = ("tiersim.report", "tiersim.runner", "tiersim.engine.simulate", "tiersim.workload")
    assert [m for m in got["modules"] if m.startswith(late)] == []
    assert "simpy" not in got["modules"]
