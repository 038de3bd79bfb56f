"""The link table's "bandwidth used" is the busier direction's bytes over the bandwidth per
direction and the step: its note says so (the port table's note, bytes / (bandwidth x step
time), read for a link, gives twice the figure where one direction carries everything)."""

from __future__ import annotations

import json
from pathlib import Path

from tiersim.report.text import step_tables

GOLDEN = Path(__file__).parent / "golden" / "reports" / "default.json"


def test_the_link_tables_bandwidth_used_is_the_busier_directions():
    report = json.loads(GOLDEN.read_text())
    text = step_tables(report)
    hbf = next(line for line in text.splitlines() if line.startswith("hbf "))
    # default.yaml: 80.86 GB a step hbm->hbf, 1.6 TB/s a direction, an 8.267 s step:
    # 80.86e9 / (1.6e12 x 8.267) = 0.611 % (the two directions' 161.73 GB would give 1.2 %)
    assert hbf.split()[-2:] == ["0.6", "%"]
    assert "bandwidth used: the busier direction's bytes / (bandwidth/dir x step time)" in text
