"""Routes through the tier graph: widest bottleneck, then least latency, then fewest hops."""

from engine_helpers import merge, scenario, tiny

from tiersim.hardware.resources import Port, TierPort
from tiersim.hardware.topology import Topology


def topo(links, tiers=None):
    raw = tiny(hardware={"links": links, **({"tiers": tiers} if tiers else {})})
    return Topology(scenario(raw).hardware)


def test_widest_route_wins_even_with_more_hops():
    # hbm-nvme direct at 2 GB/s, or hbm-dram-nvme at min(10, 5) = 5 GB/s: the wider one.
    t = topo({"direct": {"between": ["hbm", "nvme"], "bandwidth": "2 GB/s"}})
    route = t.route("hbm", "nvme")
    assert route.tiers == ("hbm", "dram", "nvme")
    assert route.bottleneck == 5e9
    # staged through DRAM: its write and read ports are crossed too
    assert TierPort("dram", Port.WRITE) in route.resources
    assert TierPort("dram", Port.READ) in route.resources


def test_equal_width_prefers_less_latency_then_fewer_hops():
    # direct link as wide as the two-hop path (5 GB/s) but 1 ms slower: the two-hop path.
    slow = {"direct": {"between": ["hbm", "nvme"], "bandwidth": "5 GB/s", "latency": "1 ms"}}
    assert topo(slow).route("hbm", "nvme").tiers == ("hbm", "dram", "nvme")
    # same width and latency: fewer hops
    fast = {"direct": {"between": ["hbm", "nvme"], "bandwidth": "5 GB/s"}}
    assert topo(fast).route("hbm", "nvme").tiers == ("hbm", "nvme")


def test_route_latency_is_source_access_plus_links():
    t = topo(
        {"pcie": {"latency": "5 us"}, "nvme": {"latency": "10 us"}},
        tiers={"nvme": {"latency": "60 us"}},
    )
    assert abs(t.route("nvme", "hbm").latency_s - (60e-6 + 10e-6 + 5e-6)) < 1e-15
    assert abs(t.route("hbm", "nvme").latency_s - (0 + 5e-6 + 10e-6)) < 1e-15


def test_unconnected_tiers_have_no_route():
    raw = merge(tiny(), {"hardware": {"links": {"nvme": {"between": ["dram", "hbm"]}}}})
    raw["hardware"]["links"] = {"pcie": raw["hardware"]["links"]["pcie"]}
    assert Topology(scenario(raw).hardware).route("hbm", "nvme") is None


def test_route_depends_on_transfer_size():
    # A direct 100 GB/s link with 1 ms latency, or hbm-dram-nvme at 5 GB/s with none.
    # 1 MB: direct 1 ms + 10 us = 1.01 ms; via DRAM 1e6 / 5e9 = 0.2 ms -> via DRAM.
    # 1 GB: direct 1 ms + 10 ms = 11 ms; via DRAM 200 ms -> direct.
    t = topo({"direct": {"between": ["hbm", "nvme"], "bandwidth": "100 GB/s", "latency": "1 ms"}})
    assert t.route("hbm", "nvme", 1e6).tiers == ("hbm", "dram", "nvme")
    assert t.route("hbm", "nvme", 1e9).tiers == ("hbm", "nvme")
    assert t.route("hbm", "nvme").tiers == ("hbm", "nvme")  # unsized: the widest


def test_topologies_of_different_graphs_never_share_a_route():
    # Routes are remembered across Topology objects of the same graph (a sweep builds one a
    # point): built in turn, a narrow and a wide direct link must each keep their own route.
    # 2 GB/s direct is narrower than hbm-dram-nvme's 5 GB/s; 8 GB/s direct is wider.
    for _ in range(2):
        narrow = topo({"direct": {"between": ["hbm", "nvme"], "bandwidth": "2 GB/s"}})
        wide = topo({"direct": {"between": ["hbm", "nvme"], "bandwidth": "8 GB/s"}})
        assert narrow.route("hbm", "nvme").tiers == ("hbm", "dram", "nvme")
        assert wide.route("hbm", "nvme").tiers == ("hbm", "nvme")
        assert wide.route("hbm", "nvme").bottleneck == 8e9
