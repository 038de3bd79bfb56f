"""The sweep files shipped in scenarios/sweeps/ validate and run, and their results make sense."""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import pytest

from tiersim.sweep.check import check_points
from tiersim.sweep.run import SweepOptions, run_sweep
from tiersim.sweep.spec import load_sweep

SWEEPS = Path(__file__).resolve().parent.parent / "scenarios" / "sweeps"
EXAMPLES = sorted(SWEEPS.glob("*.yaml"))
# Llama 2 7B: 6,738,415,616 parameters (Touvron et al. 2023, Hugging Face config);
# fp32 master weights (4 B) + fp32 Adam moments (8 B) per parameter, all rewritten every step.
LLAMA2_7B = 6_738_415_616
HBF_WRITES_PER_STEP = LLAMA2_7B * (4 + 8)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_shipped_sweep_validates(path):
    spec = load_sweep(path)
    assert check_points(spec) == (spec.size, []) and spec.size > 1


@pytest.mark.slow
def test_hbf_write_bandwidth_sweep_runs_and_more_bandwidth_is_never_slower(tmp_path):
    spec = load_sweep(SWEEPS / "hbf-write-vs-accumulation.yaml")
    options = SweepOptions(tmp_path / "out", 2, plots=False, progress=io.StringIO())
    rows = run_sweep(spec, options).table.rows
    assert len(rows) == 16 and {r["status"] for r in rows} == {"ok"}
    by_accumulation = defaultdict(list)
    for row in rows:
        bandwidth = float(row["hardware.tiers.hbf.write_bandwidth"].split()[0]) * 1e9
        # the optimizer's write-back to HBF cannot finish faster than HBF can take the bytes
        assert row["step.time_s"] >= HBF_WRITES_PER_STEP / bandwidth * (1 - 1e-9)
        by_accumulation[row["training.grad_accumulation"]].append(row["step.time_s"])
    for times in by_accumulation.values():  # bandwidth listed in increasing order
        assert times == sorted(times, reverse=True)
