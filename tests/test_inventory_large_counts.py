"""`tiersim inventory`'s header and tier table print large counts and shares with thousands
separators, as every other count: `data 100000000` and `2805088908.3 %` did not."""

from __future__ import annotations

import re

from conftest import SCENARIOS


def test_a_large_data_size_and_share_have_separators(cli):
    code, out, err = cli(
        "inventory",
        SCENARIOS / "default.yaml",
        "--set",
        "parallel.data=100000000",
        "--set",
        "hardware.tiers.hbm.capacity=1 GB",
    )
    assert code == 0, err
    assert "tensor 1, data 100,000,000, ZeRO 0;" in out
    # hbm holds 45.27 GB resident (the default scenario's, unsplit at ZeRO 0) of 1 GB:
    # 4,527 % used, printed with its separator
    (row,) = [line for line in out.splitlines() if line.startswith("hbm ") and "%" in line]
    assert re.search(r" 4,52\d\.\d % ", row), row
