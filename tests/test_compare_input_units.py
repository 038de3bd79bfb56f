"""`tiersim compare`'s inputs table shows a size or bandwidth in the decimal units `run` uses,
the scenario's written form beside it where its unit differs: the review saw
`hardware.tiers.hbm.capacity 81008 MiB` against `143155 MiB` where `run` says 84.94 GB."""

from __future__ import annotations

from tiersim.report.compare import compare_tables


def _inputs_table(a, b, path="hardware.tiers.hbm.capacity"):
    result = {"inputs": [{"path": path, "a": a, "b": b}], "outputs": []}
    return compare_tables(result, "A", "B")


def test_binary_capacities_read_in_runs_decimal_gb():
    # 81008 MiB = 81,008 x 1,048,576 B = 84,943,650,816 B = 84.94 GB (run's figure);
    # 143155 MiB = 143,155 x 1,048,576 B = 150,109,880,320 B = 150.11 GB
    (row,) = [ln for ln in _inputs_table("81008 MiB", "143155 MiB").splitlines() if "hbm" in ln]
    assert "84.94 GB (81008 MiB)" in row and "150.11 GB (143155 MiB)" in row


def test_a_bandwidth_already_in_runs_unit_is_shown_as_written():
    # 4.8 TB/s is in run's decimal unit already: as written, once; 8 Gb/s (bits) = 1e9 B/s,
    # run's 1.00 GB/s
    text = _inputs_table("4.8 TB/s", "8 Gb/s", "hardware.tiers.hbm.bandwidth")
    (row,) = [ln for ln in text.splitlines() if "hbm.bandwidth" in ln]
    assert row.count("4.8 TB/s") == 1 and "1.00 GB/s (8 Gb/s)" in row


def test_other_inputs_are_shown_as_written():
    text = _inputs_table("h100", "15 us", "hardware.preset")
    assert "h100" in text and "15 us" in text
