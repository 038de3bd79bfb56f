"""Invariants of the engine over random small scenarios (hypothesis)."""

import math

from engine_helpers import merge, scenario, tiny
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.runner import simulate

TIERS = ["hbm", "dram", "nvme"]

random_raw = st.fixed_dictionaries(
    {
        "layers": st.integers(1, 3),
        "mb": st.integers(1, 3),
        "optimizer": st.sampled_from(["adam", "sgd", "sgd_momentum"]),
        "weights": st.sampled_from(TIERS),
        "gradients": st.sampled_from(TIERS),
        "master": st.sampled_from(TIERS),
        "opt_state": st.sampled_from(TIERS),
        "activations": st.sampled_from(TIERS),
        "compute": st.sampled_from(["gpu", "cpu"]),
        "pcie": st.sampled_from(["2 GB/s", "10 GB/s", "50 GB/s"]),
        "nvme": st.sampled_from(["1 GB/s", "5 GB/s", "20 GB/s"]),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "step": st.sampled_from(["synchronous", "pipelined"]),
    }
)


def build_raw(p):
    return tiny(
        model={
            "parameters": 1_000_000_000 * p["layers"],
            "layers": p["layers"],
            "activation_bytes_per_layer": "1 GB",
        },
        training={
            "grad_accumulation": p["mb"],
            "optimizer": p["optimizer"],
            "recompute": p["recompute"],
            "optimizer_step": p.get("step", "synchronous"),
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
        },
        placement={
            "weights": p["weights"],
            "gradients": p["gradients"],
            "master": p["master"],
            "optimizer": p["opt_state"],
            "activations": p["activations"],
            "optimizer_compute": p["compute"],
        },
        hardware={
            "links": {"pcie": {"bandwidth": p["pcie"]}, "nvme": {"bandwidth": p["nvme"]}},
            "tiers": {"nvme": {"latency": "60 us"}},
        },
    )


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Sharing links fairly is not monotone in every case: a transfer that finishes sooner can let
# a later one start and share bandwidth with a critical one. Measured over 3,600 random cases
# of this space (benchmarks/bench_monotone.py, docs/science.md "The timing model"): none with the
# default synchronous optimizer step; with the pipelined one 0.5 %, by at most 3.0 %. The
# bound below is that measurement, not a wish: a larger slowdown is a bug.
MONOTONE_TOLERANCE = 0.05


@SETTINGS
@given(random_raw, st.sampled_from(["pcie", "nvme"]))
def test_more_bandwidth_on_any_link_never_slows_a_step(p, link):
    raw = build_raw(p)
    base = simulate(scenario(raw))
    faster = merge(raw, {"hardware": {"links": {link: {"bandwidth": "100 GB/s"}}}})
    assert simulate(scenario(faster)).time_s <= base.time_s * (1 + MONOTONE_TOLERANCE)


def test_more_bandwidth_never_slows_a_single_offload_stream():
    # One offloaded class at a time has nothing to reorder: strictly monotone.
    for cls in ("weights", "gradients", "master", "optimizer", "activations"):
        times = []
        for bw in ("1 GB/s", "2 GB/s", "8 GB/s", "64 GB/s", "unlimited"):
            raw = tiny(
                model={
                    "parameters": 2_000_000_000,
                    "layers": 2,
                    "activation_bytes_per_layer": "1 GB",
                },
                training={
                    "optimizer": "adam",
                    "grad_accumulation": 2,
                    "precision": {"weights": "bf16", "master": "fp32"},
                },
                placement={cls: "dram"},
                hardware={"links": {"pcie": {"bandwidth": bw}}},
            )
            times.append(simulate(scenario(raw)).time_s)
        assert times == sorted(times, reverse=True), (cls, times)


@SETTINGS
@given(random_raw)
def test_unlimited_bandwidth_and_no_latency_expose_no_transfer(p):
    unlimited = {"bandwidth": "unlimited", "latency": "0 s"}
    raw = merge(
        build_raw(p),
        {
            "hardware": {
                "links": {"pcie": unlimited, "nvme": unlimited},
                "tiers": {t: unlimited for t in TIERS},
            }
        },
    )
    r = simulate(scenario(raw))
    assert r.exposed_transfer_s <= 1e-9 * r.time_s


@SETTINGS
@given(random_raw)
def test_bytes_are_conserved_and_links_never_exceed_bandwidth(p):
    raw = build_raw(p)
    s = scenario(raw)
    r = simulate(s)
    classes = {c for t in r.tiers.values() for c in [*t.read_by_source, *t.written_by_source]}
    for c in classes:  # every byte read out of a tier is written into another
        read = sum(t.read_by_source.get(c, 0) for t in r.tiers.values())
        written = sum(t.written_by_source.get(c, 0) for t in r.tiers.values())
        assert read == written
    for name, link in r.links.items():
        bw = s.hardware.links[name].bandwidth
        for nbytes in link.bytes_by_direction.values():
            assert nbytes <= bw * r.time_s * (1 + 1e-9)
        assert link.busy_s <= r.time_s * (1 + 1e-9)
        # bytes move only while their transfer is in flight, and nothing flies past the step
        assert link.busy_s <= link.in_flight_s * (1 + 1e-9) + 1e-12
        assert link.in_flight_s <= r.time_s * (1 + 1e-9)
    for t in r.tiers.values():
        assert t.low_bytes >= 0
        assert t.peak_bytes >= t.resident_bytes


@SETTINGS
@given(random_raw)
def test_full_recompute_costs_one_extra_forward(p):
    none = simulate(scenario(merge(build_raw(p), {"training": {"recompute": "none"}})))
    full = simulate(scenario(merge(build_raw(p), {"training": {"recompute": "full"}})))
    # backward = 2 x forward, so one extra forward adds a third of forward + backward
    assert math.isclose(full.compute_s, none.compute_s * 4 / 3, rel_tol=1e-9)
    assert math.isclose(full.recompute_s, none.compute_s / 3, rel_tol=1e-9)


@SETTINGS
@given(random_raw, st.sampled_from(["pcie", "nvme"]), st.sampled_from(["2x", "10x", "unlimited"]))
def test_ordered_sharing_is_strictly_monotone(p, link, more):
    # `ordered`: one transfer at a time per link direction, in issue order. Every event time
    # is then a max-plus expression of fixed durations, so on a topology with one route per
    # pair of tiers (a tree, like every shipped preset) more bandwidth can never slow a step.
    raw = merge(build_raw(p), {"simulation": {"link_sharing": "ordered"}})
    base = simulate(scenario(raw))
    old = float(p[link].split()[0])
    new = "unlimited" if more == "unlimited" else f"{old * int(more[:-1])} GB/s"
    faster = merge(raw, {"hardware": {"links": {link: {"bandwidth": new}}}})
    assert simulate(scenario(faster)).time_s <= base.time_s * (1 + 1e-9)


@SETTINGS
@given(random_raw)
def test_a_synchronous_update_is_never_faster_than_a_pipelined_one_when_ordered(p):
    # The synchronous step is the pipelined one with more dependencies (every gradient before
    # any update, the whole update before the next step). With `ordered` sharing every event
    # time is a max-plus expression, and more dependencies can only delay it.
    raw = merge(build_raw(p), {"simulation": {"link_sharing": "ordered"}})
    times = {
        mode: simulate(scenario(merge(raw, {"training": {"optimizer_step": mode}}))).time_s
        for mode in ("synchronous", "pipelined")
    }
    assert times["synchronous"] >= times["pipelined"] * (1 - 1e-12), times
