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


def test_an_integral_count_read_as_a_float_is_shown_as_an_integer():
    # the schema reads pe_cycles as a float (3000 -> 3000.0); the review saw `3000.0` shown
    text = _inputs_table(3000.0, 5000.0, "hardware.tiers.hbf.endurance.pe_cycles")
    (row,) = [ln for ln in text.splitlines() if "pe_cycles" in ln]
    assert row.split()[1:] == ["3000", "5000"]
    # a fraction keeps its digits
    assert "1.5" in _inputs_table(1.5, 2.0, "training.expert_imbalance")


def test_a_changed_hardware_preset_is_listed_among_the_inputs_that_differ():
    from tiersim.api import load
    from tiersim.api_commands import compared_documents
    from tiersim.report.compare import changed, flatten

    a = load("scenarios/default.yaml")  # hardware.preset: h200-hbf
    b = load("scenarios/default.yaml", {"hardware.preset": "h200-hbf-8stack"})
    doc_a, doc_b = compared_documents(a, b)
    rows = {c.path: (c.a, c.b) for c in changed(flatten(doc_a), flatten(doc_b))}
    assert rows["hardware.preset"] == ("h200-hbf", "h200-hbf-8stack")
    assert "model.preset" not in rows  # llama-2-7b on both sides: not an input that differs
