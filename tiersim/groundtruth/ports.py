"""A TCP port on 127.0.0.1 for a server another process starts later (gloo's rendezvous store,
a Dask scheduler), kept from everything else on the machine until then.

Binding port 0, reading the number and closing the socket (the usual `free_port`) leaves a
window: until the server binds it, the kernel may hand the same port to any other process's
bind(0) (another test's gloo ranks or Dask workers, under pytest-xdist) or to an outgoing
connection, and the server then fails with "address already in use", or, where another
server listens there, its clients talk to the wrong one.

Here the port stays bound, with SO_REUSEADDR and never listening: Linux then gives it to no
bind(0) (inet_csk_find_open_port skips a port with a bound socket) and to no connect()
(__inet_hash_connect skips a port in the bind table), refuses it to a bind without
SO_REUSEADDR, and lets a server that sets SO_REUSEADDR bind and listen on it: PyTorch's
TCPStore (both backends) and Tornado's bind_sockets (Dask) do. A connection to it is refused
until that server listens.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

HOST = "127.0.0.1"
_HELD: list[socket.socket] = []  # free_port's reservations: held until this process exits


def _reserve() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A port on HOST no other process is given while in here (see above)."""
    with _reserve() as sock:
        yield int(sock.getsockname()[1])


def free_port() -> int:
    """A port on HOST kept from every other process for the rest of this one: for a caller
    that hands the number to processes it starts (one socket held a call; a measurement makes
    a few)."""
    sock = _reserve()
    _HELD.append(sock)
    return int(sock.getsockname()[1])
