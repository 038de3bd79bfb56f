"""Fluid bandwidth sharing: small timelines computed by hand, and invariants."""

import itertools
import math

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.engine.flows import Flow, FlowNetwork, max_min_rates, priority_rates


def _run(capacity, starts):
    """starts: (time, name, bytes, resources). Returns [(name, finish time)] in order."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, channel_of=lambda r: r)
    log = []

    def begin(name, nbytes, resources):
        net.start(nbytes, resources, lambda: log.append((name, env.now)))

    for at, name, nbytes, resources in starts:
        env.timeout(at).callbacks.append(lambda _e, n=name, b=nbytes, r=resources: begin(n, b, r))
    env.run()
    return log, net


def test_two_transfers_share_one_link():
    # a: 100 B alone at 10 B/s for 2 s -> 80 B left. b (40 B) joins: 5 B/s each.
    # b needs 40/5 = 8 s -> done at 10 s; a then has 80 - 40 = 40 B at 10 B/s -> 14 s.
    log, net = _run({"L": 10.0}, [(0, "a", 100, ("L",)), (2, "b", 40, ("L",))])
    assert log == [("b", 10.0), ("a", 14.0)]
    assert net.busy.intervals["L"] == [(0, 14.0)]


def test_bottleneck_elsewhere_leaves_the_rest_to_others():
    # y crosses r1 (10 B/s) and r2 (2 B/s): y gets 2, x gets the remaining 8 of r1.
    # x: 80 B / 8 = 10 s. y: 10 B / 2 = 5 s; after 5 s x runs alone at 10:
    # x has 80 - 5*8 = 40 B left -> 4 s more -> 9 s.
    log, _ = _run({"r1": 10.0, "r2": 2.0}, [(0, "x", 80, ("r1",)), (0, "y", 10, ("r1", "r2"))])
    assert log == [("y", 5.0), ("x", 9.0)]


def test_three_transfers_finish_in_order_of_size():
    # Three flows on a 30 B/s link: each gets 10 B/s. c (10 B) ends at 1 s; then 15 B/s each:
    # b had 20 - 10 = 10 left -> 10/15 s more; a then alone with 30 - 10 - 10 = 10 B at 30 B/s.
    log, _ = _run({"L": 30.0}, [(0, "a", 30, ("L",)), (0, "b", 20, ("L",)), (0, "c", 10, ("L",))])
    names = [n for n, _ in log]
    times = [t for _, t in log]
    assert names == ["c", "b", "a"]
    assert math.isclose(times[0], 1.0)
    assert math.isclose(times[1], 1.0 + 10 / 15)
    assert math.isclose(times[2], 1.0 + 10 / 15 + 10 / 30)


def test_unlimited_capacity_moves_instantly():
    log, _ = _run({"L": math.inf}, [(1.5, "a", 10**12, ("L",))])
    assert log == [("a", 1.5)]


def test_max_min_rates_by_hand():
    flows = [
        Flow(1, ("a",), lambda: None),
        Flow(1, ("a", "b"), lambda: None),
        Flow(1, ("b",), lambda: None),
    ]
    # b (cap 4) is shared by flows 1 and 2 -> 2 each; flow 0 takes a's remaining 10 - 2 = 8.
    assert max_min_rates(flows, {"a": 10.0, "b": 4.0}) == [8.0, 2.0, 2.0]


flow_lists = st.lists(
    st.tuples(
        st.floats(0, 5),
        st.integers(1, 10_000),
        st.sets(st.sampled_from(["r1", "r2", "r3"]), min_size=1),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(flow_lists, st.lists(st.floats(1.0, 1000.0), min_size=3, max_size=3))
def test_no_resource_carries_more_than_capacity_times_busy_time(specs, caps):
    capacity = dict(zip(["r1", "r2", "r3"], caps, strict=True))
    starts = [(t, i, b, tuple(sorted(rs))) for i, (t, b, rs) in enumerate(specs)]
    log, net = _run(capacity, starts)
    assert sorted(n for n, _ in log) == list(range(len(specs)))  # every flow delivered
    finish = dict(log)
    for r, cap in capacity.items():
        carried = sum(b for _, i, b, rs in starts if r in rs)
        busy = sum(e - s for s, e in net.busy.intervals.get(r, []))
        assert carried <= cap * busy * (1 + 1e-9) + 1e-6
    for t, i, b, rs in starts:  # no flow beats its own bottleneck
        assert finish[i] - t >= b / min(capacity[r] for r in rs) * (1 - 1e-9)


def test_issue_order_sharing_serves_earlier_transfers_first():
    # Priority 0 takes all 10 B/s of L; priority 1 uses only what is left (r2 is its own).
    flows = [
        Flow(1, ("L",), lambda: None, priority=1),
        Flow(1, ("L",), lambda: None, priority=0),
        Flow(1, ("r2",), lambda: None, priority=2),
    ]
    assert priority_rates(flows, {"L": 10.0, "r2": 3.0}) == [0.0, 10.0, 3.0]


def test_issue_order_timeline():
    # a (issued first, 50 B) holds the 10 B/s link until 5 s; b (20 B, issued second, started
    # at 1 s) waits, then runs alone: 5 + 2 = 7 s.
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 10.0}, policy=priority_rates)
    log = []
    net.start(50, ("L",), lambda: log.append(("a", env.now)), priority=0)
    env.timeout(1).callbacks.append(
        lambda _e: net.start(20, ("L",), lambda: log.append(("b", env.now)), priority=1)
    )
    env.run()
    assert log == [("a", 5.0), ("b", 7.0)]


def _run_delayed(capacity, starts):
    """starts: (time, name, bytes, resources, delay). Returns ([(name, end)], network)."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, channel_of=lambda r: r)
    log = []

    def begin(name, nbytes, resources, delay):
        net.start(nbytes, resources, lambda: log.append((name, env.now)), delay=delay)

    for at, *args in starts:
        env.timeout(at).callbacks.append(lambda _e, a=args: begin(*a))
    env.run()
    return log, net


def test_a_delayed_flow_alone_costs_one_event_and_is_busy_only_after_its_latency():
    # 50 B at 10 B/s after 3 s of latency: ends at 3 + 5 = 8 s; the link is busy [3, 8).
    log, net = _run_delayed({"L": 10.0}, [(0, "a", 50, ("L",), 3.0)])
    assert log == [("a", 8.0)]
    assert net.wakeups == 1  # the latency needs no wake-up of its own
    assert net.busy.intervals["L"] == [(3.0, 8.0)]


def test_a_delayed_flow_shares_only_from_its_begin():
    # As two_transfers_share_one_link, b delayed 2 s instead of started at 2 s: a alone at
    # 10 B/s until 2 s (80 B left), then 5 B/s each: b's 40 B end at 10 s, a's 40 B at 14 s.
    log, _ = _run_delayed({"L": 10.0}, [(0, "a", 100, ("L",), 0.0), (0, "b", 40, ("L",), 2.0)])
    assert log == [("b", 10.0), ("a", 14.0)]


def test_a_flow_that_arrives_during_anothers_latency_runs_alone_until_it_begins():
    # c: 60 B after 4 s. d: 50 B at 1 s, alone at 10 B/s until c begins at 4 s (20 B left),
    # then 5 B/s each: d ends at 4 + 20/5 = 8 s; c has 60 - 20 = 40 B, alone: 8 + 4 = 12 s.
    starts = [(0, "c", 60, ("L",), 4.0), (1, "d", 50, ("L",), 0.0)]
    log, _ = _run_delayed({"L": 10.0}, starts)
    assert log == [("d", 8.0), ("c", 12.0)]
    # d of 20 B ends (at 1 + 2 = 3 s) before c begins: c then runs alone, 4 + 6 = 10 s
    starts = [(0, "c", 60, ("L",), 4.0), (1, "d", 20, ("L",), 0.0)]
    log, _ = _run_delayed({"L": 10.0}, starts)
    assert log == [("d", 3.0), ("c", 10.0)]


@given(
    st.lists(
        st.tuples(st.integers(0, 39), st.integers(1, 40)).filter(lambda se: se[0] < se[1]),
        max_size=15,
    )
)
def test_busy_intervals_are_disjoint_sorted_and_cover_every_span(spans):
    """Spans added as flows end (in order of end, starts in any order): read back as disjoint,
    sorted intervals, touching ones merged, covering the same unit cells (metrics reads them
    as they are, without merging again)."""
    from tiersim.engine.flows import BusyLog

    log = BusyLog()
    for start, end in sorted(spans, key=lambda se: se[1]):
        log.add_span("L", float(start), float(end))
    merged = log.intervals.get("L", [])
    cells = {c for s, e in spans for c in range(s, e)}
    assert {c for s, e in merged for c in range(int(s), int(e))} == cells
    assert all(s < e for s, e in merged)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(merged))


def test_one_group_shares_its_narrowest_resource_evenly():
    # Three flows on the same route (a: 9 B/s, b: 6 B/s, c: unlimited): b binds, 6 / 3 each.
    flows = [Flow(1, ("a", "b", "c"), lambda: None) for _ in range(3)]
    assert max_min_rates(flows, {"a": 9.0, "b": 6.0, "c": math.inf}) == [2.0, 2.0, 2.0]
    # no finite resource at all: unconstrained
    assert max_min_rates(flows[:2], {"a": math.inf, "b": math.inf, "c": math.inf}) == [
        math.inf,
        math.inf,
    ]


def test_a_resource_listed_twice_counts_twice_in_the_filling():
    # Two flows each crossing "a" (10 B/s) twice: the filling counts 4 users of a: 10 / 4.
    flows = [Flow(1, ("a", "a"), lambda: None) for _ in range(2)]
    assert max_min_rates(flows, {"a": 10.0}) == [2.5, 2.5]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.lists(st.floats(0.5, 1e12), min_size=1, max_size=4))
def test_one_group_rate_is_the_least_capacity_over_the_flow_count(n, caps):
    # to the bit, alone and beside a flow on a resource of its own (the full filling)
    names = [f"r{k}" for k in range(len(caps))]
    capacity = {**dict(zip(names, caps, strict=True)), "z": 1.0}
    flows = [Flow(1, tuple(names), lambda: None) for _ in range(n)]
    assert max_min_rates(flows, capacity) == [min(caps) / n] * n
    other = Flow(1, ("z",), lambda: None)
    assert max_min_rates([*flows, other], capacity) == [min(caps) / n] * n + [1.0]


def test_a_flow_into_an_emptied_network_runs_alone_and_costs_one_wake_up():
    # a: 50 B at 10 B/s, alone: ends at 5 s. b (40 B) at 6 s into the empty network, 1 s of
    # latency: moves from 7 s, alone until c (30 B, no latency) joins at 9 s with 40 - 20 = 20
    # B left; 5 B/s each: b ends at 9 + 4 = 13 s, c then has 30 - 20 = 10 B alone: 14 s.
    starts = [(0, "a", 50, ("L",), 0.0), (6, "b", 40, ("L",), 1.0), (9, "c", 30, ("L",), 0.0)]
    log, net = _run_delayed({"L": 10.0}, starts)
    assert log == [("a", 5.0), ("b", 13.0), ("c", 14.0)]
    assert net.busy.intervals["L"] == [(0, 5.0), (7.0, 14.0)]
    # a's end, b's end (planned at its start, superseded when c joins), b's end again, c's end
    assert net.wakeups == 4
