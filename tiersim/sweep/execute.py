"""Where points run: a local process pool (the default) or a Dask cluster.

Both offer the same three operations (submit, wait, close) to one bounded loop that keeps a
few calls per worker in flight (each a batch of points) and hands back finished ones in batches
as they complete. Dask is imported only when asked for, so the core does not need it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import itertools
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures as cf
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tiersim.core import stops
from tiersim.core.errors import InputError, Problem
from tiersim.sweep import handoff
from tiersim.sweep.dask_address import CONNECT_S, check_address, quiet, reachable
from tiersim.sweep.lifeline import watch
from tiersim.sweep.local_start import WORKER_MODULE, local_context
from tiersim.sweep.signals import Gate, blocked, deferred, unblock

DASK_HINT = "pip install 'tiersim[dask]'"


class SweepAborted(Exception):
    """The executor itself failed (e.g. a worker process died); finished points are kept."""


class Pool(Protocol):
    slots: int
    same_files: bool  # its workers see this process's files (so may write the sweep's)

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any: ...

    def wait(self, pending: set[Any]) -> set[Any]: ...

    def close(self, stop: bool = False) -> None: ...


def start_worker(sweep_pid: int) -> None:
    """Pool initializer: watch the sweep process (see `lifeline`), and have the points' code
    imported (where the fork server did not already) before the first point arrives.

    Ctrl-C, sent to the terminal's whole process group, is ignored: the sweep process stops
    its workers itself (`LocalPool.close`); here it would raise in a point (and come back as
    its outcome) or in the wait for the next task (a traceback, and a worker lost). Until now
    it and SIGTERM were blocked (see `LocalPool`); a SIGTERM that came meanwhile ends the
    worker now, as it would have then."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    unblock()  # blocked from the worker's start (see LocalPool)
    watch(sweep_pid)
    importlib.import_module(WORKER_MODULE)
    gc.freeze()  # what is loaded now lives as long as the worker: the collector skips it


class LocalPool:
    """A process pool on this machine: `workers` processes from a fork server (else spawned).

    Each worker watches this process and exits when it is gone (see `lifeline`). The fork
    server imports the points' code once, so each worker starts with it; every worker is
    started at once, in the background: the first start waits for the server's imports
    (about 0.3 s), which this process's own first point and estimate hide.

    Every call's outcome comes back through `handoff`: a message too small for a killed worker
    to tear, any larger outcome in a file in `folder` (a temporary folder of the pool's own
    when none is given), so a worker's death breaks the pool (SweepAborted) and never hangs it.

    Ctrl-C and SIGTERM are blocked in the processes the pool starts until a worker's
    initializer: the fork server (which protects itself from Ctrl-C only once its imports are
    done) and a worker (from its fork to `start_worker`) would otherwise die of one while
    importing, with a traceback, or "Fatal Python error" in the interpreter's own start. A
    signal mask is inherited by a child and kept across exec, so the thread that starts the
    server or a spawned worker blocks them while it does (as CPython starts its resource
    tracker, bpo-33613); this process still gets them: in its other threads, or once unblocked.
    """

    _starting: threading.Thread | None = None
    _own_folder: str | None = None
    same_files = True

    def __init__(self, workers: int, folder: Path | None = None):
        if workers < 1:
            raise ValueError(f"workers(={workers}) must be >= 1")
        if folder is None:
            self._own_folder = tempfile.mkdtemp(prefix="tiersim-pool-")
        self.folder = str(folder) if folder is not None else self._own_folder
        context = local_context()
        self.pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=start_worker,
            initargs=(os.getpid(),),
        )
        self.slots = workers
        self._starting = threading.Thread(target=self._start_all, name="tiersim-pool-start")
        self._starting.start()

    def _start_all(self) -> None:
        """Start every worker (a task submitted while none is idle starts one); a spawned
        one (no fork server) inherits this thread's mask (see the class)."""
        # closed or broken first; EOFError, OSError: the fork server ended (Ctrl-C, say)
        with blocked(), contextlib.suppress(RuntimeError, cf.BrokenExecutor, EOFError, OSError):
            for _ in range(self.slots):
                self.pool.submit(os.getpid)

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> cf.Future:
        """A submission here may start a worker (one not yet started, while none is idle); a
        signal that cut it short, between the fork server's connection and the data sent
        on it, would leave the server or the new worker a traceback: it acts once done."""
        with deferred():
            try:
                sent = self.pool.submit(handoff.call, self.folder, fn, arg)
            except cf.BrokenExecutor as exc:
                raise SweepAborted(f"the worker pool broke ({exc})") from None
            received: cf.Future = cf.Future()
            received.set_running_or_notify_cancel()
            sent.add_done_callback(lambda done: self._receive(done, received))
        return received

    def _receive(self, sent: cf.Future, received: cf.Future) -> None:
        """`received` gets what `sent` handed back (run by the pool's manager thread)."""
        try:
            if sent.cancelled():
                raise cf.CancelledError()
            received.set_result(handoff.receive(self.folder, sent.result()))
        except BaseException as exc:  # the point's own exception, or a broken pool's
            received.set_exception(exc)

    def wait(self, pending: set[Any]) -> set[Any]:
        return cf.wait(pending, return_when=cf.FIRST_COMPLETED).done

    def close(self, stop: bool = False) -> None:
        """Shut the pool down once its running calls are done; with `stop` (an interrupted or
        failed run), end its workers now instead: what they run was never to be kept."""
        if self._starting is not None:
            self._starting.join()  # every worker started, so every one is stopped
        if stop:
            self._terminate_workers()
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self._own_folder is not None:
            shutil.rmtree(self._own_folder, ignore_errors=True)

    def _terminate_workers(self) -> None:
        """SIGTERM each worker; the pool sees them end (a broken pool) and shuts down at once.
        ProcessPoolExecutor has no public way to until Python 3.14 (terminate_workers): its
        process table, `_processes` (pid: Process), is read, and None once shut down."""
        processes = getattr(self.pool, "_processes", None) or {}
        for process in list(processes.values()):
            with contextlib.suppress(OSError, ValueError):  # gone already, or closed
                process.terminate()


class DaskPool:
    """A dask.distributed client: to the scheduler at `address`, or to a new local cluster.

    A scheduler that goes away (killed, its machine lost) breaks the pool (SweepAborted, so
    the sweep keeps its finished points and says how to resume) instead of leaving the sweep
    waiting on futures that never finish or failing in the client (ClosedClientError); so
    does a cluster left without any worker for NO_WORKERS_S."""

    same_files = False  # a scheduler's workers may be on other machines
    POLL_S = 0.5  # how often a wait looks at the client's connection and the workers
    NO_WORKERS_S = 60.0  # a cluster without workers this long is taken as lost
    CLOSE_S = 2  # the most a close waits for a scheduler (gone, it would wait 20 s)

    def __init__(self, address: str | None, workers: int):
        distributed = _distributed()
        self.distributed = distributed
        self.cluster = None
        if address is None:
            self.cluster = distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=":0",  # any free port: never clash with a running cluster
                silence_logs=40,  # logging.ERROR
            )
            address = self.cluster.scheduler_address
        self.address = address
        # a scheduler that dies mid-sweep breaks the client's batched stream, which Dask logs
        # at INFO with its traceback from the client's own thread, as soon as the send fails
        # (distributed/batched.py `_background_send`), before the sweep sees the loss and
        # says it in one line: its INFO records dropped, its warnings and errors kept
        import logging

        logging.getLogger("distributed.batched").setLevel(logging.WARNING)
        try:
            self.client = _connect(distributed, address)
        except InputError:
            if self.cluster is not None:
                self.cluster.close()
            raise
        self.slots = max(1, sum(self.client.nthreads().values()))
        self.finished = distributed.as_completed(loop=self.client.loop)

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        try:
            future = self.client.submit(fn, arg, pure=False)
            self.finished.add(future)
            return future
        except Exception as exc:  # ClosedClientError, a lost connection: the pool is gone
            self.check()
            raise SweepAborted(f"the Dask client failed ({type(exc).__name__}: {exc})") from None

    def wait(self, pending: set[Any]) -> set[Any]:
        """The futures finished since the last wait (at least one), looking every POLL_S that
        the scheduler is still there and has workers."""
        without_workers = 0.0
        while True:
            self.check()
            waited = 0.0
            while waited < self.POLL_S:
                done = self.finished.next_batch(block=False)
                if done:
                    self.check()  # futures cancelled as the scheduler went: not outcomes
                    return set(done)
                time.sleep(TICK_S)
                waited += TICK_S
            without_workers = 0.0 if self._has_workers() else without_workers + waited
            if without_workers >= self.NO_WORKERS_S:
                why = f"the Dask scheduler at {self.address} has had no workers for "
                raise SweepAborted(f"{why}{self.NO_WORKERS_S:g} s")

    def check(self) -> None:
        """Raise SweepAborted where the client has lost its scheduler."""
        status = getattr(self.client, "status", "running")
        if status not in ("running", "newly-created"):
            raise SweepAborted(
                f"lost the Dask scheduler at {self.address} (the client is {status})"
            )

    def _has_workers(self) -> bool:
        try:
            return bool(self.client.nthreads())
        except Exception:  # the scheduler went: check() says so next
            return True

    def close(self, stop: bool = False) -> None:
        """Close the client (and a cluster of its own), never waiting long on a scheduler
        that is gone, nor failing on it: the sweep's outcome is said already."""
        lost = getattr(self.client, "status", "running") not in ("running", "newly-created")
        with (
            contextlib.suppress(Exception),
            quiet("distributed") if lost else contextlib.nullcontext(),
        ):
            self.client.close(timeout=self.CLOSE_S)
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close(timeout=self.CLOSE_S)


def _distributed() -> Any:
    """dask.distributed, or the input error of a machine without the Dask extra."""
    try:
        import distributed
    except ImportError as exc:
        problem = Problem("", f"needs the optional Dask extra: {DASK_HINT} ({exc})", "E-EXECUTOR")
        raise InputError("--executor dask", [problem]) from None
    return distributed


TICK_S = 0.02  # how often a Dask wait looks for finished futures (a point takes 2-900 ms)


def check_executor(executor: str, scheduler: str | None) -> None:
    """What `open_pool` would refuse of the executor and scheduler, said before a sweep
    makes its folder (a refused sweep leaves nothing behind)."""
    if executor == "local":
        if scheduler is not None:
            why = "is for --executor dask (the local executor needs no scheduler)"
            problem = Problem("", why, "E-EXECUTOR")
            raise InputError("--scheduler", [problem])
        return
    _distributed()
    if scheduler is not None:
        check_address(scheduler)


def _connect(distributed: Any, address: str) -> Any:
    check_address(address)
    reachable(address)
    try:
        return distributed.Client(address, timeout=f"{CONNECT_S}s", set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:
        problem = Problem(
            "", f"cannot connect to a Dask scheduler at {address!r}: {exc}", "E-EXECUTOR"
        )
        raise InputError("--scheduler", [problem]) from None


def open_pool(
    executor: str, workers: int, scheduler: str | None, folder: Path | None = None
) -> Pool:
    """`folder`: where a local worker may leave an outcome too large for a message (see
    `handoff`); the sweep's own, so that `--resume` removes what a killed sweep left there."""
    if executor == "local":
        check_executor(executor, scheduler)
        return LocalPool(workers, folder)
    if executor == "dask":
        return DaskPool(scheduler, workers)
    raise ValueError(f"executor(={executor!r}) must be 'local' or 'dask'")


Done = TypeVar("Done")


def run_on_pool(
    executor: str,
    workers: int,
    scheduler: str | None,
    folder: Path | None,
    body: Callable[[Pool], Done],
) -> Done:
    """`body(pool)` on a pool opened for it and closed after, however it ends: the first
    SIGINT or SIGTERM stops it as its handler does (KeyboardInterrupt, say), the workers are
    stopped at once, and no signal can land between the pool's opening and its closing's
    certainty, or cut the closing short (see `signals`): one that comes then acts once the
    pool is closed. A stop whose exception was dropped (`tiersim.core.stops`) stops it before
    the pool opens, or as a signal would while it runs (`stream`)."""
    stops.check()
    gate = Gate()  # holding
    try:
        pool = open_pool(executor, workers, scheduler, folder)
    except BaseException:
        gate.restore(deliver=True)
        raise
    try:
        gate.allow()
        result = body(pool)
        gate.hold()
    except BaseException:  # the signal or error that stopped it is what the caller sees
        gate.hold()
        try:
            pool.close(stop=True)
        finally:
            gate.restore(deliver=False)
        raise
    try:
        pool.close()
    finally:
        gate.restore(deliver=True)
    return result


def stream(
    pool: Pool,
    fn: Callable[[Any], Any],
    args: Iterable[Any],
    started: Sequence[Any] = (),
    window: int | None = None,
) -> Iterator[list[tuple[int, Any]]]:
    """Run `fn` on every arg (`started`: the calls of the first ones, submitted already);
    yield batches of (position, result or the exception raised). `window`: the most calls in
    flight (by default a few a worker; fewer where each result may make the next call moot).

    A Ctrl-C or SIGTERM (see `signals.deferred`) stops it while it waits for the pool, or
    when the caller asks for the next batch, never while a batch is taken and handled."""
    window = max(8, 4 * pool.slots) if window is None else max(1, window)
    pending: dict[Any, int] = {future: position for position, future in enumerate(started)}
    queue = itertools.islice(enumerate(args), len(pending), None)
    for position, arg in queue:
        pending[pool.submit(fn, arg)] = position
        if len(pending) >= window:
            break
    while pending:
        stops.check()  # a stop whose exception was dropped (`tiersim.core.stops`) stops it here
        done = pool.wait(set(pending))  # where a signal stops it (or in the caller's code)
        with deferred():  # from here until the caller asks for the next batch: none is lost
            batch = [(pending.pop(future), _outcome(future)) for future in done]
            for position, arg in queue:
                pending[pool.submit(fn, arg)] = position
                if len(pending) >= window:
                    break
            yield sorted(batch, key=lambda item: item[0])


def _outcome(future: Any) -> Any:
    try:
        return future.result()
    except Exception as exc:  # returned to the caller, which decides what it means
        return exc
