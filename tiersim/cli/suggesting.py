"""The command line's parser, saying the choice meant where one is mistyped: `tiersim runn`
and `--format jsn` listed the choices only, where a misspelt scenario key or value is told
"did you mean" (Python 3.11's argparse has no suggest_on_error)."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

_INVALID = re.compile(r"invalid choice: '((?:[^'\\]|\\.)*)' \(choose from (.*)\)$")


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser (its subcommands' too: add_subparsers makes them of its class) whose
    "invalid choice" error ends with the closest choice, where one is close."""

    def error(self, message: str) -> NoReturn:
        found = _INVALID.search(message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2))
            given = found.group(1)
            same_case = [c for c in choices if c.lower() == given.lower()]
            close = same_case or difflib.get_close_matches(given.lower(), choices, n=1)
            if close:
                message += f" (did you mean '{close[0]}'?)"
        super().error(message)
