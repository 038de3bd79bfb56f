"""Sweeps on a real Dask cluster (scheduler and worker processes on 127.0.0.1) match local runs."""

from __future__ import annotations

import io
import sys

import pytest
from test_sweep_spec import write_sweep

from tiersim.core.errors import InputError
from tiersim.sweep.run import SweepOptions, run_sweep
from tiersim.sweep.spec import load_sweep

distributed = pytest.importorskip("distributed")

SMALL = {  # 4 points, one of them invalid (24 layers on 5 pipeline stages)
    "set": {"placement.optimizer": "hbf"},
    "grid": {"hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "100 GB/s"]},
    "zip": {"parallel.pipeline": [1, 5]},
}


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler and two single-threaded worker processes on loopback; shut down after."""
    cluster = distributed.LocalCluster(
        host="127.0.0.1",
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",  # any free port: never clash with a running cluster
        silence_logs=40,
    )
    try:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def on_the_local_pool(tmp_path_factory):
    """SMALL swept on the local pool, once for the tests that compare a Dask run with it:
    (its sweep file, its outcome, its --out folder)."""
    folder = tmp_path_factory.mktemp("local")
    path = write_sweep(folder, SMALL)
    return path, sweep(path, folder / "out"), folder / "out"


def sweep(path, out, executor="local", scheduler=None, resume=False):
    options = SweepOptions(
        out, 2, executor, scheduler, resume=resume, plots=False, progress=io.StringIO()
    )
    return run_sweep(load_sweep(path), options)


@pytest.mark.slow
def test_a_dask_cluster_gives_the_same_rows_as_the_local_pool(
    tmp_path, scheduler, on_the_local_pool
):
    path, local, local_out = on_the_local_pool
    remote = sweep(path, tmp_path / "dask", "dask", scheduler)
    assert [r["status"] for r in remote.table.rows] == ["ok", "invalid", "ok", "invalid"]
    assert remote.table.rows == local.table.rows
    for name in ("results.csv", "results.parquet"):
        assert (tmp_path / "dask" / name).read_bytes() == (local_out / name).read_bytes()
    points = sorted(p.name for p in (tmp_path / "dask" / "points").iterdir())
    assert points == sorted(p.name for p in (local_out / "points").iterdir())
    assert len(points) == 2
    again = sweep(path, tmp_path / "dask", "dask", scheduler, resume=True)
    assert (again.ran, again.reused) == (0, 4)


@pytest.mark.slow
def test_without_a_scheduler_a_local_cluster_is_started_and_stopped(tmp_path, on_the_local_pool):
    path, local, _ = on_the_local_pool
    own = sweep(path, tmp_path / "own", "dask")
    assert own.table.rows == local.table.rows


def test_dask_missing_is_a_clear_input_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    path = write_sweep(tmp_path, SMALL)
    with pytest.raises(InputError) as caught:
        sweep(path, tmp_path / "out", "dask")
    assert caught.value.render().startswith(
        "--executor dask: needs the optional Dask extra: pip install 'tiersim[dask]'"
    )


def test_an_unknown_scheduler_scheme_is_an_input_error(tmp_path, cli, monkeypatch):
    # every value right on its own (SMALL's pipeline 5 would be refused first)
    path = write_sweep(tmp_path, {**SMALL, "zip": {"parallel.pipeline": [1, 2]}})
    monkeypatch.chdir(tmp_path)  # no --out: the sweep's folder, results/s, is made here
    code, _, err = cli("sweep", path, "--executor", "dask", "--scheduler", "foo://bar")
    assert code == 2
    assert "--scheduler: unknown address scheme in 'foo://bar'" in err
    assert not (tmp_path / "results").exists()  # refused before the sweep's folder is made


def test_a_scheduler_without_the_dask_executor_leaves_no_folder(tmp_path, cli, monkeypatch):
    path = write_sweep(tmp_path, SMALL)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("sweep", path, "--scheduler", "tcp://127.0.0.1:8786")
    assert code == 2 and "--scheduler: is for --executor dask" in err
    assert not (tmp_path / "results").exists()


def test_a_scheduler_needs_the_dask_executor(tmp_path, cli):
    path = write_sweep(tmp_path, SMALL)
    code, _, err = cli("sweep", path, "--scheduler", "tcp://127.0.0.1:8786")
    assert code == 2 and "--scheduler: is for --executor dask" in err


@pytest.mark.slow
def test_plan_on_a_dask_cluster_ranks_as_the_local_pool(tmp_path, scheduler, cli):
    import json

    import yaml
    from test_sweep_spec import TINY

    path = tmp_path / "plan.yaml"
    space = {"placement.optimizer": ["hbm", "hbf", "dram"], "placement.master": ["hbm", "hbf"]}
    path.write_text(yaml.safe_dump({**TINY, "plan": space}))
    runs = {}
    for executor in ("local", "dask"):
        extra = ["--scheduler", scheduler] if executor == "dask" else []
        args = ["plan", path, "--format", "json", "--workers", "2", "--executor", executor]
        code, out, err = cli(*args, *extra)
        assert code == 0, err
        runs[executor] = json.loads(out)
    assert runs["dask"] == runs["local"]
    assert runs["local"]["candidates"]["simulated"] == 6
