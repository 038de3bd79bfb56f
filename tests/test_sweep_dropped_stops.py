"""A Ctrl-C or SIGTERM whose exception is dropped, or turned into another, still stops the sweep.

A stop signal's handler raises wherever the main thread is. Raised in a `__del__` (or a
weakref's or the collector's callback) the exception is printed ("Exception ignored in ...")
and dropped; raised in Python that pydantic-core calls while it builds a model, it comes back
wrapped in a SchemaError (seen: a SIGINT 0.71 s after `main` started, exit 1 and a traceback).
Either way the stop must not be lost: exit 130 or 143, the line, the resume hint, no point
kept that the stop cut short. The signal is raised for real (`signal.raise_signal`), inside
the context that drops it: CPython runs the handler before `raise_signal` returns."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from test_sweep_spec import write_sweep

import tiersim.sweep.run as sweep_run
from tiersim.cli import main
from tiersim.cli.stopping import Terminated
from tiersim.core import stops
from tiersim.sweep.store import LOG_NAME, read_log

FOUR = {"grid": {"training.grad_accumulation": [1, 2, 3, 4]}}  # 4 points of TINY
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
EXCEPTION = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}
SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}


@pytest.fixture(autouse=True)
def ctrl_c_interrupts():
    """Python's own Ctrl-C handler (a suite started as a background job ignores SIGINT), and
    SIGTERM's put back after (`main` in a caller's process restores it too)."""
    saved = {sig: signal.getsignal(sig) for sig in EXIT}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class Dropping:
    """An object whose `__del__` gets the signal: CPython prints its exception and drops it."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __del__(self) -> None:
        signal.raise_signal(self.sig)


def dropped(sig: int) -> None:
    Dropping(sig)  # collected at once: its __del__ runs here


def wrapped(sig: int) -> None:
    """As pydantic-core does with what the Python it calls raises while it builds a model."""
    try:
        signal.raise_signal(sig)
    except BaseException as exc:
        raise RuntimeError(f"Error building a serializer: {exc!r}") from None


def sweep(tmp_path: Path, capsys) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    path = write_sweep(tmp_path, FOUR)
    code = main(["sweep", str(path), "--out", str(out), "--workers", "1", "--no-plots"])
    return code, capsys.readouterr().err, out


def assert_stopped(sig: int, code: int, err: str, out: Path) -> None:
    assert code == EXIT[sig], err
    hint = f"\ntiersim: {SAID[sig]}; finished points are kept in {out}; rerun with --resume\n"
    assert err.endswith(hint), err
    assert stops.asked() is None  # taken: a later command in this process starts clean


@pytest.mark.parametrize("sig", list(EXIT), ids=["SIGINT", "SIGTERM"])
def test_a_stop_dropped_in_a_del_before_the_pool_opens_stops_the_sweep(
    tmp_path, capsys, monkeypatch, sig
):
    expand = sweep_run.expand

    def expand_then_drop(spec):  # the sweep's first step, before its pool opens
        points = expand(spec)
        dropped(sig)
        return points

    monkeypatch.setattr(sweep_run, "expand", expand_then_drop)
    unraisable = []  # what CPython drops ("Exception ignored in ..." where this hook is its own)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    code, err, out = sweep(tmp_path, capsys)
    assert [type(u.exc_value) for u in unraisable] == [EXCEPTION[sig]]  # dropped
    assert_stopped(sig, code, err, out)
    assert read_log(out / LOG_NAME)[0] == {}  # stopped before any point ran


def test_a_stop_wrapped_in_another_exception_while_a_point_runs_stops_the_sweep(
    tmp_path, capsys, monkeypatch
):
    run_point = sweep_run.run_point

    def point_then_wrapped(task):  # the first point, run in the sweep's process
        try:
            wrapped(signal.SIGINT)
        except RuntimeError as exc:  # as `run_point` records a point's own error
            assert "KeyboardInterrupt" in str(exc)
        return run_point(task)

    monkeypatch.setattr(sweep_run, "run_point", point_then_wrapped)
    code, err, out = sweep(tmp_path, capsys)
    assert_stopped(signal.SIGINT, code, err, out)
    assert read_log(out / LOG_NAME)[0] == {}  # the point the stop cut short is not kept
