"""The full prose of representative messages (tests/golden/messages/*.txt, written by
tests/golden/capture_messages.py from tests/message_cases.py) is what tiersim says now, and
each says the problem code and key path its case expects: the exit code, then each problem
line's source and key path at its start and its code at its end."""

from __future__ import annotations

import pytest
from message_cases import CASES, GOLDEN, groups, run, section

from tiersim.core.problem_codes import CODES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_message_says_its_code_and_key_path(case, tmp_path):
    code, stderr = run(case, tmp_path)
    assert code == case.exit_code
    lines = stderr.splitlines()
    assert len(lines) == len(case.codes), stderr
    for line, (problem_code, where) in zip(lines, case.codes, strict=True):
        assert problem_code in CODES
        assert line.endswith(f" [{problem_code}]"), line
        assert line.startswith(f"{where}: "), line


@pytest.mark.parametrize("group", sorted(groups()))
def test_the_golden_messages_are_what_tiersim_says(group, tmp_path):
    said = []
    for i, case in enumerate(groups()[group]):
        folder = tmp_path / str(i)
        folder.mkdir()
        said.append(section(case, run(case, folder)[1]))
    assert "\n".join(said) == (GOLDEN / f"{group}.txt").read_text(), (
        f"tests/golden/messages/{group}.txt differs: a deliberate rewording is recaptured with "
        "tests/golden/capture_messages.py"
    )
