"""The shared resources transfers cross, each with a bandwidth: typed, so that a misspelt one
is an error rather than a resource of its own.

A move crosses tier ports and link directions (its route); a collective crosses one of the
GPU's network channels. Each resource is a small immutable value usable as a dictionary key
(a named tuple: the engine hashes and compares resources millions of times a run, and a
tuple does both in C), built only through its constructor, which checks its kind. Each says
which channel it belongs to (a link's name, a network channel; a tier port none), for the
busy time the report gives per link. Resources order by (kind, names...), so that flow
rates break ties the same way in every run.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class Port(Enum):
    READ = "read"
    WRITE = "write"


class NetChannel(Enum):
    """The GPU's physical channels for collectives: NVLink inside a node, the NICs across."""

    NVLINK = "nvlink"
    NETWORK = "network"


class _TierPort(NamedTuple):
    port: str  # Port's value
    tier: str


class TierPort(_TierPort):
    __slots__ = ()

    def __new__(cls, tier: str, port: Port) -> TierPort:
        if not isinstance(port, Port):
            raise TypeError(f"port {port!r} is not a Port")
        return super().__new__(cls, port.value, tier)

    @property
    def channel(self) -> None:
        return None


class _LinkDirection(NamedTuple):
    kind: str  # "link"
    link: str
    direction: str  # "src->dst"


class LinkDirection(_LinkDirection):
    __slots__ = ()

    def __new__(cls, link: str, src: str, dst: str) -> LinkDirection:
        return super().__new__(cls, "link", link, f"{src}->{dst}")

    @property
    def channel(self) -> str:
        return self.link


class _Network(NamedTuple):
    kind: str  # "net"
    name: str  # NetChannel's value


class Network(_Network):
    """One of the GPU's network channels, shared by every group's collectives on it."""

    __slots__ = ()

    def __new__(cls, channel: NetChannel) -> Network:
        if not isinstance(channel, NetChannel):
            raise TypeError(f"network channel {channel!r} is not a NetChannel")
        return super().__new__(cls, "net", channel.value)

    @property
    def channel(self) -> str:
        return self.name


Resource = TierPort | LinkDirection | Network
