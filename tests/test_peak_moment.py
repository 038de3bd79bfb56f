"""The memory timeline's words name the right moment: where the device holds most (the
allocator's reserve at its most) is said apart from where allocation peaks when the two differ,
and a step that runs out says which part it could not allocate, in `inventory`'s table as in
`run`'s headline."""

from __future__ import annotations

from conftest import scenario
from test_memory_timeline import TINY

from tiersim.report.json_report import inventory_report
from tiersim.report.memory import section_of, timeline_text
from tiersim.report.plot_memory import memory_title
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import CUDA_CONTEXT_BYTES, gpu_timeline
from tiersim.state.timeline import Event, evaluate

MiB = 2**20


def reserves_most_after_its_peak():
    """Two 12 MiB activations, freed, then one 16 MiB fp32 copy at the optimizer step.

    The large pool (> 1 MiB) gives a request of 10 MiB or more a segment of its own, rounded
    to 2 MiB: 12 MiB each. Allocated: 12, 24 (the peak, forward), 12, 0, then 16 MiB at the
    step. The freed 12 MiB blocks stay cached in their own segments (never merged across
    segments) and cannot hold 16 MiB: a third segment, so reserved = 12 + 12 + 16 = 40 MiB
    at the optimizer step, with 16 MiB allocated."""
    events = [
        Event("forward: layer 0", "forward", "a0", "saved activations", 12 * MiB, True),
        Event("forward: layer 1", "forward", "a1", "saved activations", 12 * MiB, True),
        Event("backward: layer 1", "backward", "a1", "saved activations", 12 * MiB, False),
        Event("backward: layer 0", "backward", "a0", "saved activations", 12 * MiB, False),
        Event("optimizer step", "optimizer", "g", "fp32 gradient copy", 16 * MiB, True),
        Event("optimizer step", "optimizer", "g", "fp32 gradient copy", 16 * MiB, False),
    ]
    return evaluate("hbm", 10**9, events, [])


def test_the_device_s_most_and_allocation_s_peak_are_two_moments():
    t = reserves_most_after_its_peak()
    assert t.peak_event.moment == "forward: layer 1" and t.peak_allocated_bytes == 24 * MiB
    assert t.peak_reserved_bytes == 40 * MiB and t.device_peak_event.moment == "optimizer step"
    mt = section_of(t)
    assert mt["peak_moment"] == "forward: layer 1"
    assert mt["peak_total_moment"] == "optimizer step"
    head = timeline_text(mt).splitlines()[0]
    # it read "peak at forward: layer 1, 41.94 MB": the 40 MiB the step reserves at its
    # optimizer step, put at a moment where 24 MiB were reserved
    assert head == (
        "hbm over the step: allocation peaks at forward: layer 1 (25.17 MB, its parts below); "
        "the device holds most at optimizer step, 41.94 MB of 1.00 GB (fits)"
    )
    title = memory_title(t)
    assert "the device holds most (the square), 41.94 MB of 1.00 GB, at optimizer step" in title
    assert "allocation peaks (the dot) at forward: layer 1" in title


def test_one_moment_where_the_device_holds_most_at_allocation_s_peak():
    # one 12 MiB segment, then a second: both peaks after the second allocation
    events = [
        Event("forward: layer 0", "forward", "a0", "saved activations", 12 * MiB, True),
        Event("forward: layer 1", "forward", "a1", "saved activations", 12 * MiB, True),
        Event("backward: layer 1", "backward", "a1", "saved activations", 12 * MiB, False),
        Event("backward: layer 0", "backward", "a0", "saved activations", 12 * MiB, False),
    ]
    t = evaluate("hbm", 10**9, events, [])
    mt = section_of(t)
    assert mt["peak_total_moment"] == mt["peak_moment"] == "forward: layer 1"
    head = timeline_text(mt).splitlines()[0]
    assert head == "hbm over the step: peak at forward: layer 1, 25.17 MB of 1.00 GB (fits)"


def test_inventory_s_table_says_which_part_the_step_could_not_allocate():
    """The tiny model of tests/test_memory_timeline.py whose loss's backward runs out: the
    table's verdict named the moment only; the part (log_softmax_backward's s·V·4 =
    128 x 32,000 x 4 = 16,384,000 B fp32 gradient) was in `run`'s headline alone."""
    fp32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
    training = {"seq_len": 128, "precision": fp32, "workspace": "0 B"}
    raw = {
        "name": "tiny",
        "model": TINY,
        "training": {**training, "implementation": "huggingface"},
    }
    r = resolve(scenario(raw))
    t = gpu_timeline(r, build_inventory(r))
    before = max(b for b, e in zip(t.reserved, t.events, strict=True) if e.phase == "forward")
    raw["hardware"] = {"tiers": {"hbm": {"capacity": f"{CUDA_CONTEXT_BYTES + before + 8 * MiB} B"}}}
    s = scenario(raw)
    mt = inventory_report(s, build_inventory(resolve(s)))["memory_timeline"]
    said = "DOES NOT FIT: out of memory at backward: loss (allocating loss gradient (fp32))"
    assert said in timeline_text(mt).splitlines()[0]


def test_the_host_s_verdict_says_which_part_it_could_not_allocate(cli):
    """zero-infinity-1t-dgx2 with 60 GB of host memory a GPU (docs/memory.md): the resident
    activations, 46.98 GB, fit; the step runs out allocating layer 113's offloaded
    activations. The table's verdict named the moment only."""
    from conftest import SCENARIOS

    code, out, _ = cli(
        "inventory",
        SCENARIOS / "zero-infinity-1t-dgx2.yaml",
        "--set",
        "hardware.tiers.dram.capacity=60 GB",
    )
    assert code == 0
    said = "DOES NOT FIT: out of memory at forward: layer 113, part 0 (allocating offloaded"
    assert said in out


def test_the_host_panel_s_title_says_which_part_it_could_not_allocate():
    """A host of 3 GB a GPU: 2 GB resident, then 2 GB of temporaries at the optimizer step
    (4 GB > 3 GB): out of memory there, allocating the temporaries."""
    from tiersim.report.plot_host import host_title
    from tiersim.state.host_timeline import HostTimeline, evaluate_host

    GB = 10**9
    events = [
        Event("start of the step", "start", "a", "resident optimizer", 2 * GB, True),
        Event("optimizer step", "optimizer", "b", "CPU optimizer step temporaries", 2 * GB, True),
        Event("optimizer step", "optimizer", "b", "CPU optimizer step temporaries", 2 * GB, False),
    ]
    h = HostTimeline(evaluate_host("dram", 3 * GB, events), node_gpus=8, node_stages=1)
    said = "DOES NOT FIT: out of memory at optimizer step (CPU optimizer step temporaries)"
    assert said in host_title(h)
