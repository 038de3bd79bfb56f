"""A network channel's collectives (tiersim.engine.channel): small timelines worked out by
hand, and, on random collectives, the same end times, busy spans and wake-ups to the bit as
the general flow network gives the same flows on one resource."""

from __future__ import annotations

import math

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.engine.busy import BusyLog
from tiersim.engine.channel import Channel
from tiersim.engine.flows import FlowNetwork


def _channel_run(capacity: float, starts) -> tuple[list, Channel, BusyLog]:
    """starts: (time, name, bytes, delay). Returns [(name, end time)] in order of landing."""
    env = simpy.Environment()
    busy = BusyLog()
    log: list[tuple[str, float]] = []
    channel = Channel(env, capacity, "net", busy, lambda tag, now: log.append((tag, now)))
    for at, name, nbytes, delay in starts:
        env.timeout(at).callbacks.append(
            lambda _e, n=name, b=nbytes, d=delay: channel.start(n, b, d)
        )
    env.run()
    return log, channel, busy


def _network_run(capacity: float, starts) -> tuple[list, FlowNetwork]:
    """The same flows on FlowNetwork, one resource "net" (its own logic: the reference)."""
    env = simpy.Environment()
    net = FlowNetwork(env, {"net": capacity}, channel_of=lambda r: r)
    log: list[tuple[str, float]] = []
    alone = ("net",)
    for at, name, nbytes, delay in starts:
        env.timeout(at).callbacks.append(
            lambda _e, n=name, b=nbytes, d=delay: net.start(
                b, alone, lambda tag, now: log.append((tag, now)), 0, d, n
            )
        )
    env.run()
    return log, net


def test_a_collective_alone_ends_after_its_latency_and_bytes_in_one_wake_up():
    # 50 B at 10 B/s after 3 s of latency: 3 + 50 / 10 = 8 s; busy [3, 8)
    log, channel, busy = _channel_run(10.0, [(0, "a", 50, 3.0)])
    assert log == [("a", 8.0)]
    assert channel.wakeups == 1
    assert busy.intervals == {"net": [(3.0, 8.0)], "*": [(3.0, 8.0)]}


def test_collectives_share_the_channel_equally_from_their_begin():
    # a: 100 B from 0 at 10 B/s; b: 40 B issued at 0 with 2 s latency. a alone until 2 s
    # (80 B left), then 5 B/s each: b's 40 B land at 2 + 8 = 10 s, a's remaining 40 B then
    # alone at 10 B/s: 14 s
    log, _, busy = _channel_run(10.0, [(0, "a", 100, 0.0), (0, "b", 40, 2.0)])
    assert log == [("b", 10.0), ("a", 14.0)]
    assert busy.intervals["net"] == [(0.0, 14.0)]


def test_three_collectives_at_once_end_in_order_of_size():
    # 30 B/s over three: 10 B/s each; c (10 B) at 1 s; then 15 B/s: b's 10 B left at
    # 1 + 10/15; a alone with 10 B at 30 B/s: 1 + 10/15 + 10/30
    log, _, _ = _channel_run(30.0, [(0, "a", 30, 0.0), (0, "b", 20, 0.0), (0, "c", 10, 0.0)])
    assert [n for n, _ in log] == ["c", "b", "a"]
    for (_, got), want in zip(log, (1.0, 1.0 + 10 / 15, 1.0 + 10 / 15 + 10 / 30), strict=True):
        assert math.isclose(got, want, rel_tol=1e-15)


def test_a_collective_of_no_bytes_takes_its_latency_and_an_infinite_channel_none():
    # no bytes: done after the latency alone (2 s), no busy time
    log, channel, busy = _channel_run(10.0, [(1, "z", 0, 2.0), (1, "now", 0, 0.0)])
    assert log == [("now", 1.0), ("z", 3.0)]
    assert busy.intervals == {} and channel.wakeups == 1  # the latency's timer
    # unlimited bandwidth: the latency alone, however many share
    log, _, _ = _channel_run(math.inf, [(0, "a", 10**12, 0.5), (0, "b", 10**12, 0.5)])
    assert log == [("a", 0.5), ("b", 0.5)]


_STARTS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.25, 1.0, 1.5, 3.0]),  # issued at (ties on purpose)
        st.integers(0, 200),  # bytes
        st.sampled_from([0.0, 0.0, 0.5, 1e-6, 2.0]),  # latency
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(_STARTS, st.sampled_from([7.0, 10.0, 33.3, math.inf]))
def test_the_channel_gives_the_flow_networks_times_spans_and_events_to_the_bit(starts, capacity):
    named = [(at, i, nbytes, delay) for i, (at, nbytes, delay) in enumerate(starts)]
    got, channel, busy = _channel_run(capacity, named)
    want, net = _network_run(capacity, named)
    assert got == want  # the same ends, in the same order, as the same floats
    assert busy.intervals.get("net", []) == net.busy.intervals.get("net", [])
    assert channel.wakeups == net.wakeups
