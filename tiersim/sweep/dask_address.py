"""A Dask scheduler's address, checked before a client is made for it, and Dask's logging
quietened once its scheduler is gone (tiersim.sweep.execute's DaskPool uses both).

A client made for an address that cannot be read, or that nothing listens at, fails only after
its own timeouts (10 s) and then waits 20 s to close, with a traceback: so both are refused
here, at once, as input errors (exit 2)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tiersim.core.errors import InputError, Problem

CONNECT_S = 10  # seconds to reach a scheduler

HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")  # addresses that are a host and a port


def check_address(address: str) -> None:
    """Refuse, at once, an address Dask could never connect to: an unknown scheme, or a
    host:port that does not parse (a port of letters, a bracket left open, a port over
    65,535). Connecting to one would fail only after the client's own timeouts, and its
    half-made client then waits 20 s to close, with a traceback."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    expected = "expected e.g. tcp://10.0.0.5:8786"
    try:
        scheme, location = parse_address(address)
    except ValueError as exc:
        raise _scheduler_problem(f"cannot read {address!r}: {exc} ({expected})") from None
    if scheme not in backends:
        known = ", ".join(f"{name}://" for name in backends)
        raise _scheduler_problem(
            f"unknown address scheme in {address!r} (expected one of: {known})"
        )
    if scheme not in HOST_PORT_SCHEMES:
        return
    try:
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise _scheduler_problem(f"cannot read {address!r}: {exc} ({expected})") from None
    if not host or not 0 < int(port) < 2**16:
        what = "no host" if not host else f"port {port} (ports are 1 to 65,535)"
        raise _scheduler_problem(f"cannot read {address!r}: {what} ({expected})")


def _scheduler_problem(why: str) -> InputError:
    return InputError("--scheduler", [Problem("", why, "E-EXECUTOR")])


def reachable(address: str) -> None:
    """Refuse a host:port address nothing listens at, before a client is made for it (one
    that fails to connect waits 20 s to close, then prints a traceback)."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in HOST_PORT_SCHEMES:
        return
    host, port = parse_host_port(location)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise _scheduler_problem(
            f"cannot connect to a Dask scheduler at {address!r}: {why}"
        ) from None


@contextlib.contextmanager
def quiet(name: str) -> Iterator[None]:
    """Dask's loggers silent from here on where the client has lost its scheduler: closing it
    while it reconnects logs the cancelled attempt with a traceback (from the client's own
    thread, maybe after the close returns); the sweep says in one line what happened."""
    import logging

    lost = [logging.getLogger(name)] + [
        logger
        for key, logger in logging.Logger.manager.loggerDict.items()
        if key.startswith(name + ".") and isinstance(logger, logging.Logger)
    ]
    for logger in lost:
        logger.disabled = True
    yield
