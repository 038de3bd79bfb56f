"""What review d (docs/review-2026-12-06-d.md) left, fixed: a count of MiB given a unit is
told what it takes; FP8 and an implementation on a generic model get a note; the same bad
binary file reads the same from --hf-config and --model."""

from __future__ import annotations

from conftest import SCENARIOS
from problem_lines import said

SCENARIO = SCENARIOS / "default.yaml"


def test_bucket_cap_mb_given_a_unit_is_told_it_is_a_count_of_mib(cli):
    # apex reads bucket_cap_mb as MiB (2**20 * bucket_cap_mb): '100 MB' was answered
    # "expected a number (got '100 MB')" with no word of the unit the key counts in
    code, _, err = cli("validate", SCENARIO, "--set", "training.apex={bucket_cap_mb: 100 MB}")
    assert code == 2
    line = said(err.strip(), SCENARIO)
    assert line.coded == ("E-TYPE", "training.apex.bucket_cap_mb")
    assert "a count of MiB" in line.message
    assert "expected a number, e.g. 100" in line.message and "'100 MB'" in line.message
