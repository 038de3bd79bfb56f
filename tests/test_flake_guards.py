"""What keeps the suite's outcome from depending on timing (docs/flaky-tests.md): a reserved
port no other process is given, hypothesis never timing an example, and a pytest-xdist worker
that ignores execnet's exit SIGINT once its tests are done."""

from __future__ import annotations

import errno
import signal
import socket

import conftest
import pytest
from hypothesis import HealthCheck, settings

from tiersim.groundtruth.ports import HOST, free_port, reserved_port


def test_a_reserved_port_is_refused_to_a_plain_bind_and_to_clients_until_a_server_listens():
    with reserved_port() as port:
        with socket.socket() as other, pytest.raises(OSError) as taken:
            other.bind((HOST, port))  # another process's server without SO_REUSEADDR
        assert taken.value.errno == errno.EADDRINUSE
        with socket.socket() as client, pytest.raises(ConnectionRefusedError):
            client.connect((HOST, port))  # nothing listens: never someone else's server
        # the server it is kept for sets SO_REUSEADDR (TCPStore, Tornado) and gets it
        with socket.socket() as server, socket.socket() as client:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((HOST, port))
            server.listen()
            client.connect((HOST, port))
    with socket.socket() as after:  # given back once the block ends
        after.bind((HOST, port))


def test_free_port_keeps_its_port_held_after_it_returns():
    port = free_port()  # its caller hands the number to ranks that bind it later
    with socket.socket() as other, pytest.raises(OSError) as taken:
        other.bind((HOST, port))
    assert taken.value.errno == errno.EADDRINUSE


def test_no_hypothesis_example_is_timed_even_under_a_tests_own_settings():
    for chosen in (settings.default, settings(max_examples=5)):  # a test's @settings(...)
        assert chosen.deadline is None
        assert HealthCheck.too_slow in chosen.suppress_health_check


def test_an_xdist_worker_ignores_sigint_once_its_session_has_finished(monkeypatch):
    before = signal.getsignal(signal.SIGINT)
    try:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        conftest.pytest_sessionfinish(session=None)  # `pytest` alone: Ctrl-C still stops it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
        conftest.pytest_sessionfinish(session=None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
