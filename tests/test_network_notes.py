"""The link table's note on what the MoE all-to-alls take of each GPU's own NIC (review
2026-12-07-g): DeepSeek-V3 over 64 expert ranks read "network 5.4 % busy" at the group's
400 GB/s while the all-to-alls alone kept each 50 GB/s NIC busy half the step. Hand-built
link entries (the shape json_report gives), no simulation."""

from __future__ import annotations

from tiersim.report.network_text import network_notes


def _network(expert_bytes: float, nics: int = 8) -> dict:
    return {
        "nics_per_gpu": nics,
        "nic_bandwidth": 50e9,
        "bandwidth_per_direction": nics * 50e9,
        "bytes_by_direction": {"expert": expert_bytes, "data": 3.7e9},
    }


def test_the_all_to_alls_nic_time_is_said_by_hand():
    # 273.59 GB at DeepEP's internode share of a 400 Gb/s NIC, 43 / 50 x 50 GB/s = 43 GB/s:
    # 273.59e9 / 43e9 = 6.3626 s alone, of a 12.794 s step 49.7 %
    note = network_notes(_network(273.59e9), 12.794)
    assert "drives 8 NICs at once" in note
    assert "all-to-alls' 273.59 GB cross each GPU's own NIC" in note
    assert "6.363 s of it alone, 49.7 % of the step" in note


def test_no_all_to_all_on_the_network_no_note():
    assert "all-to-alls" not in network_notes(_network(0.0), 10.0)
    assert network_notes(None, 10.0) == ""
    # one NIC a GPU's group: no rings note, the all-to-all note alone
    assert network_notes(_network(43e9, nics=1), 10.0).startswith("\nnetwork: the MoE")
