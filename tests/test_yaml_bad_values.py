"""A YAML value PyYAML's pure reader lets Python refuse (an escape past U+10FFFF, a tag naming a
type its text is not) is exit 2 with the file, the line and column, what is wrong and what was
expected, never a traceback: through libyaml first (it refuses them) and the pure reader after."""

from __future__ import annotations

import pytest
from problem_lines import said

CASES = {
    # U+10FFFF is the last code point: 0x01E300C5 is past it (chr() raises ValueError), and
    # 0xD800DC00 past 31 bits (OverflowError). Line 2: `  name: "\` is 10 characters, so the
    # digits after `\U` begin at column 12
    "escape past U+10FFFF": (
        'name: x\nmodel:\n  name: "\\U01e300C5"\n',
        "YAML syntax error at line 3, column 12: found an escape \\U01e300C5 of no Unicode "
        "character (expected at most \\U0010FFFF, the last code point)",
    ),
    "escape past 31 bits": (
        'name: x\nmodel: {name: "\\UD800DC00"}\n',
        # `model: {name: "\U` is 17 characters: the digits begin at column 18
        "YAML syntax error at line 2, column 18: found an escape \\UD800DC00 of no Unicode "
        "character (expected at most \\U0010FFFF, the last code point)",
    ),
    "a float tag on a word": (
        "name: x\nmodel: {preset: gpt2}\nx: !!float abc\n",
        # the tagged value starts at `!!`, the 4th character of line 3
        "YAML syntax error at line 3, column 4: 'abc' tagged !!float (expected a number, "
        "such as 1.5 or 2e-3)",
    ),
    "a bool tag on a word": (
        "name: x\nx: [!!bool maybe]\n",
        "YAML syntax error at line 2, column 5: 'maybe' tagged !!bool (expected true or false)",
    ),
    "a timestamp tag on a word": (
        "name: x\nx: !!timestamp soon\n",
        "YAML syntax error at line 2, column 4: 'soon' tagged !!timestamp (expected a date, "
        "such as 2024-05-01)",
    ),
    "a map tag on a word": (
        "name: x\nx: !!map soon\n",
        "YAML syntax error at line 2, column 4: expected a mapping node, but found scalar",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_python_refuses_is_an_input_error(cli, tmp_path, case):
    text, expected = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _out, err = cli("validate", path)
    assert code == 2, err
    assert "Traceback" not in err
    assert said(err.strip(), path).coded == ("E-YAML", "")
    assert said(err.strip(), path).message == expected
