"""A sweep killed with SIGKILL mid-run, then resumed, has exactly one row per point; one
stopped with SIGINT (Ctrl-C) or SIGTERM (a batch scheduler) keeps its finished points, says how
to resume and exits 130 or 143; a worker killed, even while it sends a result, stops the sweep
cleanly (never a hang); killing only its main process ends its workers, fork server and
resource tracker too."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_sweep_spec import write_sweep

import tiersim.sweep.run as run_module
from tiersim.cli import main
from tiersim.sweep.lifeline import wait_for_exit
from tiersim.sweep.run import SweepOptions, run_sweep
from tiersim.sweep.spec import load_sweep
from tiersim.sweep.store import LOG_NAME, read_log


def grid(capacities: int) -> dict:
    """A sweep of 10 x `capacities` points of TINY (each a few milliseconds)."""
    return {
        "grid": {
            "training.grad_accumulation": list(range(1, 11)),
            "hardware.tiers.dram.capacity": [f"{100 + 10 * i} GB" for i in range(capacities)],
        }
    }


POINTS = 10 * 60  # a second or more on 2 workers: the sweep commits every COMMIT_S (0.25 s)
LARGE = grid(60)
# For the tests that resume the sweep they stopped: half as many points, the stopped sweep on
# one core (see `start`). It runs about as long as LARGE on two, so the signal lands as far
# into it, and the resume (on every core) has half as many points left to run.
HALF_POINTS = 10 * 30
HALF = grid(30)


def wait_for_lines(path, count: int, proc: subprocess.Popen, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before it could be killed: {proc.stderr.read()!r}")
        time.sleep(0.005)
    pytest.fail(f"no {count} finished points within {limit_s} s")


def as_from_a_terminal() -> None:
    """In the child, before it runs: Ctrl-C's default, whatever the tests inherited (a
    shell's background job runs with SIGINT ignored, and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def on_one_core() -> None:
    """In the child: as from a terminal, and on one of the cores this test may use; the pool's
    fork server and workers inherit it, so the sweep's two workers share that core."""
    as_from_a_terminal()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def start(path, out, one_core: bool = False) -> subprocess.Popen:
    command = [sys.executable, "-m", "tiersim.cli", "sweep", str(path), "--out", str(out)]
    return subprocess.Popen(
        [*command, "--workers", "2", "--no-plots"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the pool's workers die with it
        preexec_fn=on_one_core if one_core else as_from_a_terminal,
    )


def resume(path, out):
    options = SweepOptions(out, 2, resume=True, plots=False, progress=io.StringIO())
    return run_sweep(load_sweep(path), options)


def assert_one_row_per_point(outcome, out) -> None:
    lines = (out / LOG_NAME).read_bytes().splitlines()
    keys = [json.loads(line)["key"] for line in lines]
    assert len(keys) == len(set(keys)) == HALF_POINTS
    rows = outcome.table.rows
    assert [r["point"] for r in rows] == list(range(HALF_POINTS))
    assert sorted(r["key"] for r in rows) == sorted(keys)
    assert {r["status"] for r in rows} == {"ok"}
    assert (out / "results.csv").read_text().count("\n") == HALF_POINTS + 1
    assert pq.read_table(out / "results.parquet").num_rows == HALF_POINTS


def descendants(pid: int) -> list[int]:
    """Processes below `pid` (from /proc), children before grandchildren."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        found += frontier
    return found


@pytest.mark.slow
def test_sigkill_then_resume_gives_exactly_one_row_per_point(tmp_path):
    path = write_sweep(tmp_path, HALF)
    out = tmp_path / "out"
    proc = start(path, out, one_core=True)
    try:
        wait_for_lines(out / LOG_NAME, 20, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    recorded, torn, _ = read_log(out / LOG_NAME)  # a line cut mid-write is not a record
    assert 20 <= len(recorded) < HALF_POINTS and torn in (0, 1)
    assert not (out / "results.csv").exists()  # tables are written only once every point is in
    outcome = resume(path, out)
    assert outcome.reused >= len(recorded)
    assert outcome.ran + outcome.reused == HALF_POINTS
    assert_one_row_per_point(outcome, out)


# how the shell reports a command each signal ended: 128 + the signal's number
STOPPED_BY = {signal.SIGINT: 130, signal.SIGTERM: 143}
SAID = {signal.SIGINT: b"interrupted", signal.SIGTERM: b"terminated (SIGTERM)"}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("to", ["process", "group"])
def test_sigint_or_sigterm_keeps_the_finished_points_and_says_how_to_resume(tmp_path, sig, to):
    """Ctrl-C signals the terminal's whole process group, a batch scheduler every process of
    the job (Slurm) or the main one alone (`kill PID`): each stops the sweep the same way."""
    path = write_sweep(tmp_path, HALF)
    out = tmp_path / "out"
    proc = start(path, out, one_core=True)
    try:
        wait_for_lines(out / LOG_NAME, 20, proc)
        below = descendants(proc.pid)
        signalled = (out / LOG_NAME).read_bytes().count(b"\n")
        if to == "group":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        left = still_running(below, limit_s=GONE_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
    assert proc.returncode == STOPPED_BY[sig], stderr
    said = b"\ntiersim: " + SAID[sig] + f"; finished points are kept in {out}; ".encode()
    assert said + b"rerun with --resume\n" in stderr
    assert b"Traceback" not in stderr and b"sweep stopped" not in stderr  # not a broken pool
    assert left == [], f"still running after the sweep stopped: {left}"
    recorded, torn, _ = read_log(out / LOG_NAME)
    assert torn == 0  # committed whole, not cut off by the signal
    assert signalled <= len(recorded) < HALF_POINTS
    assert not (out / "results.csv").exists()
    outcome = resume(path, out)
    assert (outcome.reused, outcome.ran) == (len(recorded), HALF_POINTS - len(recorded))
    assert_one_row_per_point(outcome, out)


@pytest.mark.slow
def test_a_worker_killed_stops_the_sweep_cleanly_and_resume_finishes_it(tmp_path):
    path = write_sweep(tmp_path, HALF)
    out = tmp_path / "out"
    proc = start(path, out, one_core=True)
    try:
        wait_for_lines(out / LOG_NAME, 20, proc)
        worker = descendants(proc.pid)[-1]  # a pool worker (a child of the fork server)
        os.kill(worker, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, stderr
    assert b"sweep stopped: the worker pool broke" in stderr
    assert b"rerun with --resume" in stderr and b"Traceback" not in stderr
    recorded, torn, _ = read_log(out / LOG_NAME)
    assert 20 <= len(recorded) < HALF_POINTS and torn == 0
    outcome = resume(path, out)
    assert outcome.reused == len(recorded)
    assert_one_row_per_point(outcome, out)


PIPE_BUF = 4096  # Linux (pipe(7)): a pipe write of at most this many bytes is never split
SMALL = {"grid": {"training.grad_accumulation": list(range(1, 11)), "parallel.data": [1, 2, 4, 8]}}
SMALL_POINTS = 10 * 4
DYING = 8  # the point whose worker is killed while sending its result


def send_then_die(connection, data, write=os.write) -> None:
    """Connection._send for a worker killed while its message is being written, the message
    left as Linux leaves a pipe write cut short: one of at most PIPE_BUF bytes whole, a longer
    one split where the pipe filled (here: half of it)."""
    view = memoryview(data)[: len(data) if len(data) <= PIPE_BUF else len(data) // 2]
    while view:
        view = view[write(connection._handle, view) :]
    os.kill(os.getpid(), signal.SIGKILL)


def die_sending_after(task) -> None:
    """In a pool worker, on point DYING: the next message it sends is cut by a kill."""
    if multiprocessing.parent_process() is not None and task.source.endswith(f" point {DYING}"):
        multiprocessing.connection.Connection._send = send_then_die


def keep_then_die_sending(job):
    result = real_keep(job)  # the local pool's function: its worker writes the reports
    tasks = job[0] if isinstance(job[0], list) else [job[0]]  # a chunk (or, in main, a point)
    for task in tasks:
        die_sending_after(task)
    return result


def run_point_then_die_sending(task):
    result = real_run_point(task)  # where the points' function is run_point (main's tree)
    die_sending_after(task)
    return result


real_run_point = run_module.run_point
real_keep = getattr(run_module, "run_and_keep", None)


def sweep_with_a_worker_dying_while_sending(argv: list[str]) -> None:
    """The sweep command in a process of its own (run by the test below): the points'
    function is this module's, so its workers import it and one of them dies as above."""
    run_module.run_point = run_point_then_die_sending
    if real_keep is not None:
        run_module.run_and_keep = keep_then_die_sending
    sys.exit(main(argv))


@pytest.mark.slow
def test_a_worker_killed_while_sending_a_result_stops_the_sweep_and_resume_finishes(tmp_path):
    path = write_sweep(tmp_path, SMALL)
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--workers", "2", "--no-plots"]
    here = str(Path(__file__).parent)
    driver = (
        f"import sys; sys.path.insert(0, {here!r}); import test_sweep_kill as t; "
        f"t.sweep_with_a_worker_dying_while_sending({argv!r})"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", driver],
        cwd=tmp_path,  # not the checkout: `-c` puts the working folder first on sys.path
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        _, stderr = proc.communicate(timeout=60)  # a torn message hangs it: this fails then
    except subprocess.TimeoutExpired:
        pytest.fail("the sweep hung after its worker died while sending a result")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
    assert proc.returncode == 1, stderr
    assert b"sweep stopped: the worker pool broke" in stderr
    assert b"rerun with --resume" in stderr and b"Traceback" not in stderr
    recorded, torn, _ = read_log(out / LOG_NAME)
    assert 1 <= len(recorded) < SMALL_POINTS and torn == 0
    assert {entry["status"] for entry in recorded.values()} == {"ok"}
    options = SweepOptions(out, 2, resume=True, plots=False, progress=io.StringIO())
    outcome = run_sweep(load_sweep(path), options)
    assert (outcome.reused, outcome.ran) == (len(recorded), SMALL_POINTS - len(recorded))
    keys = [json.loads(line)["key"] for line in (out / LOG_NAME).read_bytes().splitlines()]
    assert len(keys) == len(set(keys)) == SMALL_POINTS
    assert [r["point"] for r in outcome.table.rows] == list(range(SMALL_POINTS))
    assert {r["status"] for r in outcome.table.rows} == {"ok"}
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(f"{k}.json" for k in keys)


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie, exited but not reaped, has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def still_running(pids: list[int], limit_s: float) -> list[int]:
    """Those of `pids` still running once all have ended or `limit_s` has passed."""
    deadline = time.monotonic() + limit_s
    left = [p for p in pids if running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if running(p)]
    return left


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_only_the_main_process_ends_every_process_it_started(tmp_path, sig):
    """SIGKILL leaves the pool to end itself (each worker's lifeline); SIGTERM the sweep handles,
    shutting its pool down."""
    path = write_sweep(tmp_path, LARGE)
    out = tmp_path / "out"
    proc = start(path, out)
    try:
        wait_for_lines(out / LOG_NAME, 2, proc)  # the first point runs before the pool's
        below = descendants(proc.pid)  # resource tracker, fork server, its workers
        assert len(below) >= 3, below
        proc.send_signal(sig)  # the process alone, not its group: nothing can shut the pool
        proc.wait(timeout=STOP_S)
        left = still_running(below, limit_s=GONE_S)  # the workers look twice a second at most
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left, so no test leaks it
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == (-sig if sig == signal.SIGKILL else STOPPED_BY[sig])
    assert left == [], f"still running after the sweep was killed: {left}"


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_a_worker_waits_while_the_sweep_runs_and_not_once_it_has_exited(monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    child = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    waiter = threading.Thread(target=wait_for_exit, args=(child.pid,), daemon=True)
    try:
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # the child runs until its stdin closes
        child.stdin.close()
        if not pidfd:
            child.wait()  # polling sees a process gone once it is reaped; a pidfd, at its exit
        waiter.join(GONE_S)
        assert not waiter.is_alive()
    finally:
        child.kill()
        child.wait()


# (first signal, second, seconds between): the second lands while the sweep stops (committing,
# or shutting its pool down). `timeout` and batch schedulers signal the process, then its group,
# within a millisecond; a user presses Ctrl-C twice. Once hung in shutdown's interrupted join.
TWICE = [
    (signal.SIGINT, signal.SIGINT, 0.0),
    (signal.SIGINT, signal.SIGINT, 0.005),
    (signal.SIGINT, signal.SIGINT, 0.03),
    (signal.SIGTERM, signal.SIGTERM, 0.005),
    (signal.SIGINT, signal.SIGTERM, 0.005),  # the first decides: interrupted
]


@pytest.mark.slow
def test_a_second_signal_while_the_sweep_stops_never_hangs_it(tmp_path):
    """Each of TWICE to the sweep's process group: it exits as the first signal says, within
    STOP_S, no traceback, nothing of it left running, the finished points kept whole."""
    path = write_sweep(tmp_path, LARGE)
    for run, (first, second, gap_s) in enumerate(TWICE):
        out = tmp_path / f"out{run}"
        proc = start(path, out)
        try:
            wait_for_lines(out / LOG_NAME, 5, proc)
            below = descendants(proc.pid)
            signalled = (out / LOG_NAME).read_bytes().count(b"\n")
            os.killpg(proc.pid, first)
            time.sleep(gap_s)
            os.killpg(proc.pid, second)
            try:
                _, stderr = proc.communicate(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{first!r} then {second!r} {gap_s} s later: still running")
            left = still_running(below, limit_s=GONE_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
        case = f"{first!r} then {second!r} {gap_s} s later: {stderr!r}"
        assert proc.returncode == STOPPED_BY[first], case
        assert b"\ntiersim: " + SAID[first] + b"; finished points are kept" in stderr, case
        assert b"Traceback" not in stderr and b"sweep stopped" not in stderr, case
        assert left == [], f"{case}: still running: {left}"
        recorded, torn, _ = read_log(out / LOG_NAME)
        assert torn == 0 and signalled <= len(recorded) < POINTS, case


# Bounds that only catch a hang: each is waited out only while what it waits for has not
# happened, so a generous one costs a passing run nothing. Stopping takes well under a second
# of CPU, a process seeing its parent gone a few ms; on a machine loaded to 10-20 on 2 cores
# either took several seconds of wall time (a 5 s grace was once too short), a hang forever.
STOP_S = 60.0
GONE_S = 60.0
