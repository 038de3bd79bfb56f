"""The API the CLI's commands are built on (tiersim/api.py, tiersim/api_commands.py): what
each command does, as a function, and problems worded for whoever gave the overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim import api
from tiersim.core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "seed-1b-adam.yaml"


def test_an_api_override_is_not_called_a_set_flag():
    with pytest.raises(InputError) as api_error:
        api.load(SCENARIO, {"bad.key": 1})
    text = str(api_error.value)
    assert "(from the override bad.key=1)" in text and "--set" not in text
    with pytest.raises(InputError) as cli_error:  # the CLI's wording, asked for
        api.load(SCENARIO, ["bad.key=1"], origin=api.SET_FLAGS)
    assert "(from --set bad.key=1)" in str(cli_error.value)
    with pytest.raises(InputError, match=r"\(from the override bad\.key=1\)"):
        api.override(api.load(SCENARIO), {"bad.key": 1})
