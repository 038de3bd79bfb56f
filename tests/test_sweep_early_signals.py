"""Ctrl-C or SIGTERM in a sweep's first second, while its commands are imported, its pool's
fork server is started and imports the points' code, and its workers start: the sweep exits
130 or 143 with its line (and, once its folder is made, the resume hint), no traceback, nothing
it started left running, and its log whole.

The instants are taken from what the sweep does, not from the clock alone: from the moment
`main` has taken SIGTERM (so the command, not the interpreter's own start, answers), and from
the header line the sweep prints just before it opens its pool. Before `main` (the interpreter
starting, `site`) a signal ends Python itself; nothing of tiersim runs yet to handle it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_sweep_kill import (
    GONE_S,
    LARGE,
    SAID,
    STOPPED_BY,
    as_from_a_terminal,
    descendants,
    running,
)
from test_sweep_spec import write_sweep

from tiersim.sweep.store import LOG_NAME, read_log

# (signal, to the process group as Ctrl-C or to the process alone as `kill PID`, the stage it
# is sent at, seconds after it begins): each a window that once printed a traceback
EARLY = [
    (signal.SIGINT, "group", "main", 0.0),  # the commands being imported
    (signal.SIGTERM, "process", "main", 0.02),
    (signal.SIGINT, "group", "header", 0.0),  # the pool opening, its fork server started
    (signal.SIGINT, "group", "server importing", 0.0),  # the points' code, in the server
    (signal.SIGTERM, "group", "server importing", 0.05),
    (signal.SIGINT, "group", "server forking", 0.0),  # the workers forked, starting
]
LIMIT_S = (
    60.0  # each stage comes well within a second of CPU (seconds of wall under load); a hang, never
)


def handles(pid: int, sig: int, how: str = "SigCgt") -> bool:
    """Whether process `pid` has a handler for `sig` (how="SigCgt") or ignores it ("SigIgn")."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{how}:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def server_is(pid: int, stage: str) -> bool:
    """Whether the fork server below `pid` is at `stage`: "importing" once its interpreter
    takes Ctrl-C (it has started), "forking" once it ignores it (its imports are done)."""
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            if b"multiprocessing.forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                ignores = handles(child, signal.SIGINT, "SigIgn")
                return ignores if stage == "forking" else handles(child, signal.SIGINT)
    return False


def reached(stage: str, pid: int, lines: list[bytes]) -> bool:
    if stage == "main":  # the CLI's `main` sets SIGTERM's handler before anything else
        return handles(pid, signal.SIGTERM)
    if stage == "header":
        return any(b"sweep 's'" in line for line in lines)
    return server_is(pid, stage.split()[1])


def in_session(sid: int) -> list[int]:
    """Processes still running in session `sid` (the sweep's: every process it started, even
    one whose parent has exited)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and running(int(entry.name)):
            with contextlib.suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid:  # state, ppid, pgrp, session
                    found.append(int(entry.name))
    return found


def wait_until(ready, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {LIMIT_S} s")
        time.sleep(0.001)


def stop_early(path: Path, out: Path, sig: int, to: str, since: str, after_s: float):
    """Start the sweep, signal it `after_s` after it reaches stage `since`; (exit code, stderr,
    processes of its session left running once it has exited)."""
    command = [sys.executable, "-m", "tiersim.cli", "sweep", str(path), "--out", str(out)]
    proc = subprocess.Popen(
        [*command, "--workers", "2", "--no-plots"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own session and group, as from a terminal
        preexec_fn=as_from_a_terminal,
    )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_until(lambda: reached(since, proc.pid, lines), proc, since)
        time.sleep(after_s)
        if to == "group":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(timeout=LIMIT_S)
        reader.join(LIMIT_S)
        deadline = time.monotonic() + GONE_S  # a worker may take a moment to see its pool gone
        while in_session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        return proc.returncode, b"".join(lines), in_session(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()


@pytest.mark.slow
def test_a_signal_in_the_first_second_stops_the_sweep_cleanly(tmp_path):
    path = write_sweep(tmp_path, LARGE)
    for run, (sig, to, since, after_s) in enumerate(EARLY):
        out = tmp_path / f"out{run}"
        code, stderr, left = stop_early(path, out, sig, to, since, after_s)
        case = f"{sig!r} to the {to}, {after_s} s after {since}: {stderr!r}"
        assert code == STOPPED_BY[sig], case
        assert b"Traceback" not in stderr and b"Fatal Python error" not in stderr, case
        assert left == [], f"{case}: still running: {left}"
        said = b"\ntiersim: " + SAID[sig]
        if since != "main":  # its folder is made: what it kept, and how to go on
            hint = f"; finished points are kept in {out}; rerun with --resume\n".encode()
            assert stderr.endswith(said + hint), case
        else:
            assert said in stderr, case
        if (out / LOG_NAME).exists():
            recorded, torn, _ = read_log(out / LOG_NAME)
            assert torn == 0, case
            if b", of the 600 to run, took " in stderr:  # said only once it is committed
                assert len(recorded) >= 1, case
