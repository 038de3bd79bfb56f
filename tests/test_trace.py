"""The Chrome/Perfetto trace: concurrent operations on one track go to separate lanes, so the
complete events of every thread nest (Trace Event Format), and nothing is lost or moved."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import SCENARIOS
from engine_helpers import scenario, tiny

from tiersim.cli import main
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.hardware.resources import NetChannel, Network
from tiersim.report.trace import lanes, trace_events
from tiersim.runner import simulate

LLAMA2_7B = 6_738_415_616  # parameters (Touvron et al. 2023; README)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([(0, 2), (1, 3), (2.5, 4), (3, 5)], [0, 1, 0, 1]),  # lane 0 free at 2, lane 1 at 3
        ([(0, 10), (1, 2), (3, 4), (2, 3)], [0, 1, 1, 1]),  # in order of start, not of input
        ([(0, 1), (1, 2), (2, 3)], [0, 0, 0]),  # ending at another's start is not overlap
        ([(0, 5), (0, 5), (0, 5), (4, 6)], [0, 1, 2, 3]),
        ([], []),
    ],
)
def test_each_span_takes_the_first_lane_free_at_its_start(spans, expected):
    assert lanes(spans) == expected


def _comm(label: str, nbytes: int) -> Op:
    channel = Network(NetChannel.NVLINK)
    return Op(
        OpKind.COMM, Role.COLLECTIVE, label, 1, [], nbytes=nbytes, resource=channel, subject="data"
    )


def test_concurrent_transfers_on_one_track_get_numbered_adjacent_lanes():
    ops = [_comm("a", 10), _comm("b", 20), _comm("c", 30)]
    records = (("op", 0, 0.0, 2.0), ("op", 1, 1.0, 3.0), ("op", 2, 2.0, 4.0))
    events = trace_events(records, ops, topo=None)["traceEvents"]
    meta = [e for e in events if e["ph"] == "M" and "tid" in e]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert sorted(names.values()) == ["nvlink data", "nvlink data (2)"]
    lane_of = {e["name"]: names[e["tid"]] for e in events if e["ph"] == "X"}
    assert lane_of == {"a": "nvlink data", "b": "nvlink data (2)", "c": "nvlink data"}
    assert sorted(order, key=order.get) == sorted(names)  # lane 0, then lane 1
    complete = [e for e in events if e["ph"] == "X"]
    assert sum(e["dur"] for e in complete) == pytest.approx(6e6)  # 2 + 2 + 2 s, in µs
    assert sum(e["args"]["bytes"] for e in complete) == 60


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """scenarios/default.yaml without its checkpoint (so the report's bytes are the step's
    own transfers), traced, every micro-batch simulated (an extrapolated trace shows the
    simulated ones: tests/test_steady.py). Its HBF budget a day long, which the step holds:
    no wear remedy is simulated (each, at 2,355 micro-batches in full, cost 1.2 s of CPU),
    and nothing read here depends on it."""
    out = tmp_path_factory.mktemp("trace")
    args = ["run", str(SCENARIOS / "default.yaml"), "--out", str(out), "--format", "json"]
    args += ["--set", "simulation.steady_state=full", "--set", "budget.hbf.lifetime=1 day"]
    assert main([*args, "--trace", "--set", "checkpoint.every_steps=null"]) == 0
    report = json.loads((out / "report.json").read_text())
    return json.loads((out / "trace.json").read_text())["traceEvents"], report


def _threads(events):
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    by_thread = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append(e)
    return names, by_thread


def _measured(report) -> int:
    """The measured step's index: 0 where one step is simulated (steps independent), else
    the one after the warm-up step."""
    return 0 if report["sim"]["steps_simulated"] == 1 else 1


def _base(name: str) -> str:
    """The track a lane belongs to: 'hbf hbf->hbm (2)' -> 'hbf hbf->hbm'."""
    head, _, tail = name.rpartition(" (")
    return head if tail.endswith(")") and tail[:-1].isdigit() else name


def test_complete_events_of_a_thread_nest_or_are_disjoint(default_run):
    events, _ = default_run
    _assert_nested(*_threads(events))


def _assert_nested(names, by_thread) -> None:
    assert set(by_thread) <= set(names)
    for thread, items in by_thread.items():
        items.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list[float] = []
        for e in items:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-6:  # 1 ps of float rounding
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-6, (names[thread], e)
            open_ends.append(end)


def test_two_routes_over_one_link_direction_take_two_lanes():
    # the update reads the gradient from DRAM and the momentum from NVMe through DRAM at
    # once: both cross PCIe dram->hbm (tests/test_link_in_flight.py), so the track needs a
    # second lane, and each lane's events still nest
    raw = tiny(
        training={"optimizer": "sgd_momentum"},
        placement={"optimizer": "nvme", "gradients": "dram"},
    )
    events = simulate(scenario(raw), record=True).trace["traceEvents"]
    names, by_thread = _threads(events)
    assert "pcie dram->hbm (2)" in names.values()
    _assert_nested(names, by_thread)


def test_lanes_keep_every_byte_and_second_of_the_step(default_run):
    events, report = default_run
    names, by_thread = _threads(events)
    measured = defaultdict(int)  # bytes per track, lanes together, in the measured step
    for thread, items in by_thread.items():
        for e in items:
            if e["args"]["step"] == _measured(report) and e["pid"] == 3:  # links
                measured[_base(names[thread])] += e["args"]["bytes"]
    # master (fp32, 4 B) and Adam moments (2 x fp32) of every parameter, each way per step;
    # the bf16 gradients' ring all-reduce over 8 GPUs: 2 x 7/8 of 2 B per parameter
    state = LLAMA2_7B * 12
    expected = {"hbf hbf->hbm": state, "hbf hbm->hbf": state, "nvlink data": LLAMA2_7B * 7 // 2}
    assert dict(measured) == expected
    links = report["links"]
    assert links["hbf"]["bytes_by_direction"] == {"hbf->hbm": state, "hbm->hbf": state}
    assert links["nvlink"]["bytes_by_direction"] == {"data": LLAMA2_7B * 7 // 2}
    ports = defaultdict(list)  # every move on its link direction and on both ports, once
    for thread, items in by_thread.items():
        if thread[0] in (3, 4):  # links, tier ports
            ports[_base(names[thread])] += [(e["name"], e["ts"], e["dur"]) for e in items]
    for link, read, write in (
        ("hbf hbf->hbm", "hbf read", "hbm write"),
        ("hbf hbm->hbf", "hbm read", "hbf write"),
    ):
        assert sorted(ports[link]) == sorted(ports[read]) == sorted(ports[write])


def test_the_gpu_stream_stays_one_lane_with_the_steps_compute(default_run):
    events, report = default_run
    names, by_thread = _threads(events)
    gpu = [t for t in by_thread if t[0] == 1]
    assert sorted(names[t] for t in gpu) == ["compute", "waiting"]  # no "compute (2)"
    stream = next(t for t in gpu if names[t] == "compute")
    step = _measured(report)
    compute = [e for e in by_thread[stream] if e["args"]["step"] == step]
    worked = sum(e["dur"] for e in compute if e["cat"] in ("forward", "backward", "recompute"))
    assert worked / 1e6 == pytest.approx(report["step"]["compute_s"], rel=1e-9)
    ends = defaultdict(float)  # the measured step ends when its last op does
    for items in by_thread.values():
        for e in items:
            ends[e["args"]["step"]] = max(ends[e["args"]["step"]], e["ts"] + e["dur"])
    begins = ends[step - 1] if step else 0.0
    assert (ends[step] - begins) / 1e6 == pytest.approx(report["step"]["time_s"], rel=1e-9)


def test_ops_are_named_in_words_each_layer_and_micro_batch(default_run):
    """Labels are built only when read (Op.label formats the schedule's (format, *args)):
    the trace still names every forward, recompute and backward by layer and micro-batch."""
    events, _ = default_run
    names = {e["name"] for e in events if e["ph"] == "X"}
    for mb in range(16):  # scenarios/default.yaml: grad_accumulation 16, 32 layers
        for layer in (0, 31):
            for what in ("forward", "recompute", "backward"):
                assert f"{what} L{layer} mb{mb}" in names


def test_a_deferred_label_reads_as_its_words():
    op = Op(OpKind.MOVE, Role.STATE, ("fetch weights {} {} mb{}", "L3", "bwd", 7), 0, [])
    assert op.label == "fetch weights L3 bwd mb7"
    assert Op(OpKind.IDLE, Role.BUBBLE, "pipeline bubble", 0, []).label == "pipeline bubble"
