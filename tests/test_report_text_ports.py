"""The text report's tier-port table where no port moves a byte (405B at 128K, all in HBM)."""

from tiersim.report.text import port_table


def test_no_port_crossed_says_so_instead_of_an_empty_table():
    zero = {"bandwidth": 4.8e12, "bytes_per_step": 0, "full_rate_s": 0.0}
    report = {"tiers": {"hbm": {"ports": {"read": zero, "write": zero}}}, "step": {}}
    # it printed the header and its rule with no rows under them
    assert port_table(report) == "tier ports: no bytes cross one (nothing moves between tiers)"
