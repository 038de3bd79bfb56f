"""Review 2026-12-07 (c): a new user's eighth pass (docs/review-2026-12-07-c.md). Each test
fails on the tree before its fix."""

import json
from types import SimpleNamespace

import pytest
from conftest import SCENARIOS

from tiersim.report.compare import compare, compare_tables
from tiersim.sweep.axes import dims
from tiersim.sweep.spec import load_sweep
from tiersim.sweep.summary import verdict_changes

DEFAULT = SCENARIOS / "default.yaml"


def test_compare_says_a_flash_tier_nothing_is_written_to_never_wears_not_dash(cli):
    """default.yaml homes master and optimizer on HBF (it wears out in days); with both in HBM
    nothing is written to HBF, and its report gives the lifetime, margin and binding limit as
    null (no bound). The table said `14.2 days -> -`, as if B had no such figure."""
    homes = ("--set", "placement.master=hbm", "--set", "placement.optimizer=hbm")
    code, out, err = cli("compare", DEFAULT, *homes)
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("wear.hbf.")}
    assert "never (nothing written)" in rows["wear.hbf.lifetime_days"]
    assert "no limit (nothing written)" in rows["wear.hbf.margin"]
    assert "none (nothing written)" in rows["wear.hbf.lifetime_bound_by"]
    code, out, err = cli("compare", DEFAULT, *homes, "--format", "json")
    moved = {r["path"]: r for r in json.loads(out)["outputs"]}
    assert moved["wear.hbf.lifetime_days"]["b"] is None  # the JSON keeps the report's null
    assert moved["wear.hbf.lifetime_days"]["nothing_written"] == ["b"]
    assert "nothing_written" not in moved["step.time_s"]


def test_compare_keeps_a_dash_for_a_tier_one_side_does_not_have():
    """A null because the tier is absent on one side (another machine) is no lifetime of
    'never': it stays '-'. Reports made by hand: the HBF tier written 1 TB a day in A, and no
    HBF at all in B."""
    wear_a = {"hbf": {"host_bytes_written_per_day": 1e12, "lifetime_days": 100.0}}
    rep_a = {"tiersim_version": "x", "wear": wear_a}
    rep_b = {"tiersim_version": "x", "wear": {}}
    result = compare({}, {}, rep_a, rep_b)
    (row,) = result["outputs"]
    assert row["path"] == "wear.hbf.lifetime_days" and "nothing_written" not in row
    line = next(x for x in compare_tables(result, "a", "b").splitlines() if "wear.hbf" in x)
    assert line.split()[1:] == ["100", "days", "-", "-", "-"]


def test_a_word_for_a_choice_is_pointed_at_that_choice_not_at_its_spelling_neighbour(cli):
    """`checkpoint.mode: sync` was told "did you mean 'async'?", the opposite (one letter
    away); DeepSpeed's offload device `cpu` as a tier got no hint at all."""
    cases = {
        "checkpoint.mode=sync": "(did you mean 'blocking'?)",
        "placement.optimizer_compute=host": "(did you mean 'cpu'?)",
        "placement.optimizer=cpu": "did you mean 'dram' (host memory)?",
        "placement.weights=gpu": "did you mean 'hbm' (the GPU's memory)?",
        "checkpoint.mode=asnyc": "(did you mean 'async'?)",  # a typo still finds its word
        "placement.optimizer=hbff": "did you mean 'hbf'?",
    }
    for given, hint in cases.items():
        code, _, err = cli("validate", DEFAULT, "--set", given)
        assert code == 2 and hint in err, (given, err)
    # the kind is read from the machine: dgx-h100's host memory tier is its dram
    dgx = ("--set", "hardware.preset=dgx-h100", "--set", "placement.master=host")
    code, _, err = cli("validate", DEFAULT, *dgx)
    assert code == 2 and "placement.master: tier 'host' does not exist (did you mean 'dram'" in err


def test_where_a_sweep_s_verdict_changes_says_a_null_as_yaml_does(tmp_path):
    """scenarios/sweeps/hbf-ranges.yaml's summary named its best point `wear_span=null` and,
    three lines down, where a verdict turns `between hardware.tiers.hbf.wear_span=None and
    ...=105.84 GB`: Python's None for the same swept value. The sweep is loaded, not run: two
    points by hand, the verdict no at null and yes at 105.84 GB."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {DEFAULT}\ngrid:\n  hardware.tiers.hbf.wear_span: [null, 105.84 GB]\n")
    spec = load_sweep(sweep)
    points = [SimpleNamespace(coords=(0,)), SimpleNamespace(coords=(1,))]
    verdict = "wear.hbf.within_budget"
    table = SimpleNamespace(outputs=[verdict], rows=[{verdict: False}, {verdict: True}])
    (line,) = verdict_changes(spec, points, table)
    assert line == (
        "wear.hbf.within_budget: false -> true between hardware.tiers.hbf.wear_span=null and "
        "hardware.tiers.hbf.wear_span=105.84 GB (1 of 1 slices)"
    )
    (axis,) = dims(spec)  # the plots' ticks and legends say it so too
    assert axis.ticks == ("null", "105.84 GB")


def test_a_script_that_sweeps_unguarded_is_told_why_its_pool_broke(monkeypatch):
    """docs/api.md's sweep cell, run as a script without `if __name__ == "__main__":` (as a
    user pastes it), broke its process pool with a bare BrokenProcessPool traceback: each
    worker imports the script again and sweeps in turn. It now says so. The pool's break is
    stood in for here (a real one takes a subprocess and its workers, about 4 s: checked by
    hand, docs/review-2026-12-07-c.md)."""
    from concurrent.futures.process import BrokenProcessPool

    import tiersim.sweep.execute as execute
    from tiersim import api

    def broken(*args, **kwargs):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly")

    monkeypatch.setattr(execute, "run_on_pool", broken)
    s = api.load(SCENARIOS / "seed-1b-adam.yaml")
    with pytest.raises(BrokenProcessPool) as raised:
        api.sweep(s, {"training.micro_batch_size": [1, 2]}, workers=2)
    said = str(raised.value)
    assert said.startswith("A process in the process pool was terminated abruptly (")
    assert 'under `if __name__ == "__main__":`' in said


def test_a_goodput_below_one_never_reads_100_percent():
    """default.yaml checkpointing to HBF (`--set checkpoint.target=hbf`) stalls 198.10 ms
    every 1,000 steps of 8.2666 s: goodput 8,266.6 / (8,266.6 + 0.1981) = 99.99760 %, which
    the line printed as "goodput 100 % counts stalls only" beside the stall (4 significant
    digits); with failures, 99.997 % printed "100.00 %" (2 decimals)."""
    from tiersim.report.checkpoint_text import checkpoint_lines, fmt_goodput

    interval_s, stall_s = 1000 * 8.2666, 0.1981
    ck = {
        "mode": "async",
        "target": "hbf",
        "interval_steps": 1000,
        "bytes": 11.79e9,
        "write_s": 1.868,
        "stall_s": stall_s,
        "recovery_s": None,
        "mtbf_s": None,
        "goodput": interval_s / (interval_s + stall_s),  # 0.9999760
    }
    (line,) = checkpoint_lines(ck, 8.2666)
    assert line.endswith(
        "no failure rate set (failures.mtbf or failures.gpu_mtbf): "
        "goodput 99.998 % counts stalls only"
    )
    assert fmt_goodput(0.97198) == "97.20 %"  # two decimals where they tell it from 100 %
    assert fmt_goodput(0.9999972) == "99.9997 %"
    assert fmt_goodput(1.0) == "100 %"  # no stall, no failure: exactly


def test_a_set_that_drops_one_key_says_it_in_the_singular(cli):
    """`--set 'budget={}'` on default.yaml (whose budget holds hbf alone) noted "its hbf take
    their defaults"; one key dropped takes its default."""
    code, _, err = cli("validate", DEFAULT, "--set", "budget={}")
    assert code == 0, err
    assert "replaces the scenario's whole budget: its hbf takes its default (" in err


def test_the_calibrated_preset_s_header_says_a_latency_in_the_unit_that_reads_it():
    """`calibrate --out` headed its preset `storage write latency: 4007 us (152.5 us ..
    1.2e+04 us, 64 runs)`: every time in microseconds, 12 ms in scientific notation. The
    header now says them as the table does, to the preset's 4 digits (the values below it keep
    their form, tests/test_calibrate_table_times.py)."""
    from tiersim.groundtruth.calibrated_preset import describe, quantity
    from tiersim.groundtruth.figure import Figure

    latency = Figure("storage write latency", "s", (1.525e-4, 4.007e-3, 1.2e-2), "fdatasync")
    assert describe(latency) == "4.007 ms (152.5 us .. 12 ms, 3 runs)"
    assert quantity(4.007e-3, "s") == "4007 us"  # the preset's value, as before


def test_building_a_transformers_model_quiets_torchao_s_import_noise(caplog):
    """`tiersim run` of a scenario whose model is a BERT config.json (built by transformers on
    the meta device) printed four lines on standard error: torchao 0.18.0's "Failed to load
    .../_C_mxfp8.cpython-310-....so" for its own kernels and torch's pytree deprecation
    warning, logged as transformers imports torchao. The build now quiets those loggers and
    gives their levels back (the import itself checked by hand: docs/review-2026-12-07-c.md)."""
    import logging

    from tiersim.config.hfmeta import NOISY, quiet_imports

    assert NOISY == ("torchao", "torch.utils._pytree")  # the loggers the lines came from
    before = [logging.getLogger(name).level for name in NOISY]
    caplog.set_level(logging.WARNING)
    with quiet_imports():
        for name in NOISY:
            logging.getLogger(name).warning("Failed to load _C_mxfp8.so")
    assert not caplog.records  # nothing logged while quiet
    assert [logging.getLogger(name).level for name in NOISY] == before
    logging.getLogger("torchao").warning("after")  # and heard again once given back
    assert [r.getMessage() for r in caplog.records] == ["after"]
