"""`tiersim calibrate`'s table printed latencies as the preset writes them, four digits in
microseconds ("3128 us", "1507 us" beside "63.1 us"); it says them as every other table does
(3.128 ms, 63.1 us). The preset file keeps its exact microseconds."""

from __future__ import annotations

from tiersim.cli.commands.calibrate import table
from tiersim.groundtruth.calibrate_settings import Calibration
from tiersim.groundtruth.calibrated_preset import quantity
from tiersim.groundtruth.figure import Figure


def test_latencies_in_the_table_read_as_times():
    latency = Figure("storage write latency", "s", (1.193e-3, 3.128e-3, 4.004e-3), "fdatasync")
    bandwidth = Figure("storage read bandwidth", "B/s", (1.457e9, 1.52e9, 1.583e9), "reads")
    cal = Calibration({f.name: f for f in (latency, bandwidth)}, [], None, 10**12)
    row = next(line for line in table(cal).splitlines() if line.startswith("storage write"))
    # median 3.128e-3 s = 3.128 ms, min 1.193 ms, max 4.004 ms (two decimals in ms: fmt_time)
    assert row.split()[3:] == ["3.13", "ms", "1.19", "ms", "4.00", "ms", "3"]
    speed = next(line for line in table(cal).splitlines() if line.startswith("storage read"))
    assert "1.52 GB/s" in speed  # other figures as before
    assert quantity(3.128e-3, "s") == "3128 us"  # the preset's exact form, unchanged
