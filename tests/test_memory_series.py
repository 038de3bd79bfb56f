"""The memory timeline's events in report.json (`tiersim run --memory-events`:
`memory_timeline.series`, `host_memory_timeline.series`; tiersim/report/memory_series.py):
a row an event, merged by moment, then by runs of moments, each row keeping the most
allocated within it; every figure below by hand."""

from __future__ import annotations

import json

import pytest

from tiersim.report.memory_series import COLUMNS, MAX_ROWS, series
from tiersim.state.timeline import Event, evaluate

START, FWD, BWD = "start of the step", "forward: layer 0", "backward: layer 0"
W, S, G, R = "resident weights", "saved activations", "gathered weights", "recompute working set"
SMALL_SEGMENT = 2 * 2**20  # every request here <= 1 MiB: one 2 MiB segment of the small pool


def _timeline():
    events = [
        Event(START, "start", "w", W, 100, True),
        Event(FWD, "forward", "s", S, 40, True),
        Event(FWD, "forward", "g", G, 30, True),
        Event(FWD, "forward", "g", G, 30, False),
        Event(BWD, "backward", "r", R, 50, True),
        Event(BWD, "backward", "r", R, 50, False),
        Event(BWD, "backward", "s", S, 40, False),
    ]
    return evaluate("hbm", 1e12, events, ())


def test_a_row_an_event_with_signed_bytes_and_running_totals():
    out = series(_timeline())
    assert out["columns"] == list(COLUMNS) and out["granularity"] == "event"
    # allocated: 100, +40 = 140, +30 = 170, -30 = 140, +50 = 190, -50 = 140, -40 = 100;
    # reserved: the small pool's one 2 MiB segment from the first request on (frees cached)
    seg = SMALL_SEGMENT
    assert out["rows"] == [
        ["start", START, W, 100, 100, seg, 100],
        ["forward", FWD, S, 40, 140, seg, 140],
        ["forward", FWD, G, 30, 170, seg, 170],
        ["forward", FWD, G, -30, 140, seg, 140],
        ["backward", BWD, R, 50, 190, seg, 190],
        ["backward", BWD, R, -50, 140, seg, 140],
        ["backward", BWD, S, -40, 100, seg, 100],
    ]


def test_more_events_than_rows_merge_by_moment_keeping_each_moments_peak():
    out = series(_timeline(), max_rows=3)  # 7 events > 3: 3 moments
    seg = SMALL_SEGMENT
    assert out["granularity"] == "moment" and out["moments_per_row"] == 1
    assert out["rows"] == [
        ["start", START, W, 100, 100, seg, 100],
        # 40 + 30 - 30 = 40 net, 140 after, 170 at most within
        ["forward", FWD, f"{S}; {G}", 40, 140, seg, 170],
        # 50 - 50 - 40 = -40 net, 100 after, 190 at most within (the step's peak)
        ["backward", BWD, f"{R}; {S}", -40, 100, seg, 190],
    ]


def test_more_moments_than_rows_merge_runs_of_moments():
    out = series(_timeline(), max_rows=2)  # 3 moments > 2: ceil(3 / 2) = 2 a row
    seg = SMALL_SEGMENT
    assert out["granularity"] == "moments" and out["moments_per_row"] == 2
    assert out["rows"] == [
        ["start/forward", f"{START} to {FWD}", f"{W}; {S}; {G}", 140, 140, seg, 170],
        ["backward", BWD, f"{R}; {S}", -40, 100, seg, 190],
    ]
    with pytest.raises(ValueError, match="max_rows"):
        series(_timeline(), max_rows=0)


def test_run_writes_the_series_only_when_asked(cli, tmp_path):
    path = "scenarios/zero-offload-10b-dgx2.yaml"  # 412 GPU events, 107 host events
    code, out, err = cli("run", path, "--out", tmp_path / "a", "--format", "json")
    assert code == 0, err
    plain = json.loads(out)
    assert "series" not in plain["memory_timeline"]  # report.json as before, the count alone
    code, out, err = cli(
        "run", path, "--out", tmp_path / "b", "--format", "json", "--memory-events"
    )
    assert code == 0, err
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report == json.loads(out)
    gpu, host = report["memory_timeline"], report["host_memory_timeline"]
    assert gpu["events"] == 412 > MAX_ROWS and gpu["series"]["granularity"] == "moment"
    assert host["events"] == 107 == len(host["series"]["rows"])  # a row an event
    for section in (gpu, host):
        rows = section["series"]["rows"]
        assert len(rows) <= MAX_ROWS
        assert sum(r[3] for r in rows) == rows[-1][4]  # the signed bytes add up to the total
        # the peak is a row's most: allocation's peak, and no row above it
        assert max(r[6] for r in rows) == section.get(
            "peak_allocated_bytes", section.get("peak_bytes")
        )
    # the rest of the report is unchanged by the flag
    del report["memory_timeline"]["series"], report["host_memory_timeline"]["series"]
    assert report == plain
