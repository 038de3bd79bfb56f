"""A Dask cluster that fails under a sweep (issue 35): a scheduler killed mid-sweep ends it
cleanly, with its finished points kept and the "rerun with --resume" line (never a hang or a
ClosedClientError traceback); an address that cannot be read is refused at once."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time

import pytest
from bounded import within
from conftest import ROOT, SCENARIOS

from tiersim.groundtruth.ports import reserved_port

pytest.importorskip("distributed")

SWEEP = SCENARIOS / "sweeps" / "hbf-wear.yaml"  # 80 points of 0.3-0.9 s: minutes on one worker
# how long the scheduler may take to start (it imports Dask: seconds of CPU, a minute and more
# of wall time on a machine loaded to 10-20 on 2 cores); waited for only until it listens
GRACE_S = 120.0


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_listening(port: int, seconds: float = GRACE_S) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no scheduler on port {port} after {seconds} s")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.mark.slow
def test_a_scheduler_killed_mid_sweep_ends_it_with_the_resume_line(tmp_path):
    with reserved_port() as port:  # no other process is given it: the scheduler binds it
        scheduler_killed_mid_sweep(port, tmp_path)


def scheduler_killed_mid_sweep(port: int, tmp_path) -> None:
    address = f"tcp://127.0.0.1:{port}"
    scheduler = _start(
        "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
        "--no-dashboard",
    )  # fmt: skip
    worker = None
    try:
        _wait_listening(port)
        worker = _start(
            "distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1",
            "--no-dashboard",
        )  # fmt: skip
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "tiersim", "sweep", str(SWEEP), "--executor", "dask"]
        command += ["--scheduler", address, "--out", str(out), "--no-plots"]
        sweep = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        err = _until(sweep, "of the 80 to run", seconds=90)  # the estimate: points under way
        time.sleep(1.0)
        _stop(scheduler)
        try:
            rest = sweep.communicate(timeout=60)[1]  # a hang fails here
        except subprocess.TimeoutExpired:
            sweep.kill()
            raise AssertionError("the sweep hung after its scheduler died") from None
        err += rest
        assert sweep.returncode == 1, err
        assert "Traceback" not in err and "ClosedClientError" not in err, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("tiersim: sweep stopped: lost the Dask scheduler at " + address)
        assert last.endswith("rerun with --resume")
        assert (out / "results.jsonl").read_bytes().count(b"\n") >= 2  # the two timed points
    finally:
        _stop(scheduler)
        if worker is not None:
            _stop(worker)


def _until(process: subprocess.Popen, text: str, seconds: float) -> str:
    """What `process` writes to stderr until a line holds `text`."""
    seen = ""
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if selector.select(timeout=1):
            line = process.stderr.readline()
            if not line:
                break
            seen += line
            if text in line:
                return seen
    process.kill()
    raise AssertionError(f"never said {text!r}: {seen}")


@pytest.mark.parametrize(
    "address, why",
    [
        ("tcp://localhost:abc", "invalid literal for int()"),
        ("tcp://[::1", "ipv6 needs brackets"),
        ("tcp://", "missing port number"),
        ("tcp://127.0.0.1:99999", "port 99999 (ports are 1 to 65,535)"),
        ("tcp://127.0.0.1:0", "port 0 (ports are 1 to 65,535)"),
        ("nosuch://127.0.0.1:8786", "unknown address scheme"),
    ],
)
def test_an_unreadable_scheduler_address_is_refused_at_once(cli, tmp_path, address, why):
    with within(5):  # refused before any connection: no 10 s timeout, no 20 s close
        code, _, err = cli(
            "sweep", SWEEP, "--executor", "dask", "--scheduler", address, "--out", tmp_path / "o"
        )
    assert code == 2
    assert err.startswith("--scheduler: ") and why in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists(), "refused before the folder is made"


def test_a_scheduler_address_nothing_listens_at_is_refused_without_a_traceback(cli, tmp_path):
    # held bound, never listening, for the whole call: nothing can listen there
    with reserved_port() as port, within(15):
        address = f"tcp://127.0.0.1:{port}"
        code, _, err = cli(
            "sweep", SWEEP, "--executor", "dask", "--scheduler", address, "--out", tmp_path / "o",
            "--no-plots",
        )  # fmt: skip
    assert code == 2
    assert f"cannot connect to a Dask scheduler at '{address}': Connection refused" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_dask_worker_that_dies_under_a_point_fails_that_point_alone():
    """A point that kills its worker process (out of memory, a segfault): the nanny starts a
    new worker and every point comes back, none hangs: the killer as its worker's failure
    (KilledWorker, recorded as an error that --resume retries), each other its result or,
    where it was queued on the same worker when it died, that failure too (Dask cannot tell
    it from the cause: it is retried as well)."""
    import dask

    from tiersim.sweep.execute import DaskPool, stream

    def die_at_one(x):
        if x == 1:
            os._exit(1)  # as the kernel's OOM killer would end it
        return x * 10

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), within(90):
        pool = DaskPool(None, 1)
        try:
            batches = list(stream(pool, die_at_one, [0, 1, 2, 3]))
        finally:
            pool.close()
    outcomes = dict(item for batch in batches for item in batch)
    assert sorted(outcomes) == [0, 1, 2, 3]
    assert type(outcomes[1]).__name__ == "KilledWorker", outcomes[1]
    for x in (0, 2, 3):
        assert outcomes[x] == x * 10 or type(outcomes[x]).__name__ == "KilledWorker"
