"""The pool's signal handling, in this process: `deferred` holds a Ctrl-C for the moment
finished points are taken or committed and lets it act at the end (or, left on an exception,
not at all), and for a submission to the pool; `blocked` keeps Ctrl-C and SIGTERM from a
process started meanwhile."""

from __future__ import annotations

import signal
import subprocess
import sys
from concurrent import futures as cf
from pathlib import Path

import pytest

from tiersim.sweep.execute import LocalPool
from tiersim.sweep.signals import Gate, blocked, deferred


@pytest.fixture(autouse=True)
def ctrl_c_interrupts():
    """Python's own Ctrl-C handler for each test: a suite started as a shell's background job
    inherits SIGINT ignored, where `raise_signal(SIGINT)` would do nothing."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.fixture
def passing_gate():
    gate = Gate()  # as run_on_pool has it while its body runs
    gate.allow()
    try:
        yield gate
    finally:
        gate.restore(deliver=False)


def test_a_ctrl_c_in_deferred_acts_once_it_ends(passing_gate):
    done = []
    with pytest.raises(KeyboardInterrupt), deferred():
        signal.raise_signal(signal.SIGINT)
        done.append("the batch committed")
    assert done == ["the batch committed"]
    assert passing_gate.held == [] and not passing_gate.passing  # a second one is only noted


def test_left_on_an_exception_deferred_keeps_the_signal_held(passing_gate):
    with pytest.raises(OSError), deferred():  # a full disk, say: it is what the caller sees
        signal.raise_signal(signal.SIGINT)
        raise OSError("no space left")
    assert passing_gate.held == [signal.SIGINT] and not passing_gate.passing


def test_without_a_gate_deferred_changes_nothing():
    done = []
    with pytest.raises(KeyboardInterrupt), deferred():
        signal.raise_signal(signal.SIGINT)
        done.append("never")
    assert done == []


def blocked_in(proc: str) -> set[int]:
    """Which of SIGINT and SIGTERM `proc` (a /proc entry: a pid, "thread-self") blocks."""
    lines = Path(f"/proc/{proc}/status").read_text().splitlines()
    line = next(x for x in lines if x.startswith("SigBlk:"))
    mask = int(line.split()[1], 16)
    return {sig for sig in (signal.SIGINT, signal.SIGTERM) if mask >> (sig - 1) & 1}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_process_started_in_blocked_has_both_signals_blocked_and_this_thread_not_after():
    with blocked():
        child = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        assert blocked_in(str(child.pid)) == {signal.SIGINT, signal.SIGTERM}  # kept across exec
    finally:
        child.kill()
        child.wait()
    assert blocked_in("thread-self") == set()


class StartingAWorker:
    """A process pool's submit that gets a Ctrl-C halfway, as while it starts a worker."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def submit(self, *call):
        signal.raise_signal(signal.SIGINT)
        self.sent.append(call)  # what the fork server waits for once it is connected to
        return cf.Future()


def test_a_ctrl_c_while_the_pool_submits_acts_once_the_submission_is_whole(passing_gate, tmp_path):
    pool = LocalPool.__new__(LocalPool)  # its submit alone, on the pool above
    pool.pool, pool.folder = StartingAWorker(), str(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        pool.submit(len, [1, 2])
    assert len(pool.pool.sent) == 1


def test_a_stop_taken_ignores_further_ones_only_in_the_program_itself():
    # a second Ctrl-C a few ms after the first landed in a GC callback ("Exception ignored
    # ... KeyboardInterrupt") once the sweep had said how it stopped; an in-process caller's
    # handlers are left alone
    import signal

    from tiersim.cli.stopping import sigterm_raises, stop_taken

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with sigterm_raises(then_ignore=False):
            stop_taken()
            with pytest.raises(KeyboardInterrupt):  # not ignored: Ctrl-C still raises
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is saved[signal.SIGINT]  # the caller's, back
        assert signal.getsignal(signal.SIGTERM) is saved[signal.SIGTERM]
        with sigterm_raises(then_ignore=True):
            stop_taken()
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
