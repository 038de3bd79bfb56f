"""The flow network's walks cut (issue 36, docs/speed.md "Eighth round"): a flow registered
planned against the plan made at the same instant, the bytes brought up to date in the split
and the rates set in the plan's walk, give every flow the same end, to the bit, and the
network the same wake-ups as the separate walks did (tests/test_checkpoint_cost.py's
`put_back` puts them back), on random transfers many of which start together."""

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_checkpoint_cost import put_back_flow_walks

from tiersim.engine import flows
from tiersim.engine.flows import FlowNetwork

CAPACITY = {"pcie": 25e9, "nvme": 7e9, "dram": 200e9}
ROUTES = [("pcie",), ("pcie", "nvme"), ("dram", "nvme"), ("dram",), ("pcie", "dram")]

# (start time, route, bytes, latency): a few instants, so that many flows register together
TRANSFERS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.001, 0.0025, 0.01]),
        st.sampled_from(range(len(ROUTES))),
        st.integers(1, 10**9),
        st.sampled_from([0.0, 0.0, 2e-6, 1e-5]),
    ),
    min_size=1,
    max_size=40,
)


def _run(transfers) -> tuple[list, int]:
    """Each transfer's end (in the order they land) and the wake-ups the network planned."""
    env = simpy.Environment()
    net = FlowNetwork(env, CAPACITY, channel_of=lambda r: r)
    ends: list = []

    def begin(k, route, nbytes, delay):
        net.start(nbytes, ROUTES[route], lambda: ends.append((k, env.now)), delay=delay)

    for k, (at, route, nbytes, delay) in enumerate(transfers):
        env.timeout(at).callbacks.append(lambda _e, a=(k, route, nbytes, delay): begin(*a))
    env.run()
    return ends, net.wakeups


@settings(max_examples=30, deadline=None)
@given(TRANSFERS)
def test_the_same_ends_and_wake_ups_as_the_separate_walks(transfers):
    new = _run(transfers)
    with pytest.MonkeyPatch.context() as m:
        put_back_flow_walks(m)
        old = _run(transfers)
    assert new == old
    assert len(new[0]) == len(transfers)


def test_registrations_at_one_instant_are_planned_without_a_walk(monkeypatch):
    """Twenty latent copies registered at once: every registration after the first
    compares the new flow with the last plan (`soonest_change` walks only at the first)."""
    walks: list[int] = []
    walk = flows.soonest_change

    def counted(flows_, now):
        walks.append(len(flows_))
        return walk(flows_, now)

    monkeypatch.setattr(flows, "soonest_change", counted)
    ends, _ = _run([(0.0, 1, 10**6 * (k + 1), 1e-5) for k in range(20)])
    assert len(ends) == 20
    # the first enters an empty network (planned without a walk), the second is walked with
    # the first (2 flows), the other 18 are each compared with the plan before them; from
    # their common begin on, every change sets new rates (`rated_soonest`, not counted) but
    # the last flow's, walked alone. The walk over every flow walked 2, 3, ..., 20.
    assert walks and max(walks) == 2
