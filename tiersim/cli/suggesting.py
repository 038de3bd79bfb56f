"""The command line's parser, saying the choice meant where one is mistyped: `tiersim runn`
and `--format jsn` listed the choices only, where a misspelt scenario key or value is told
"did you mean" (Python 3.11's argparse has no suggest_on_error)."""

from __future__ import annotations

import argparse
import itertools
import re
from typing import NoReturn

_INVALID = re.compile(r"invalid choice: '((?:[^'\\]|\\.)*)' \(choose from (.*)\)$")


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser (its subcommands' too: add_subparsers makes them of its class) whose
    "invalid choice" error ends with the closest choice, where one is close, and whose missing
    scenario says where an option took it (`run --trace x.yaml`: x.yaml became the trace)."""

    _given: tuple[str, ...] = ()  # the arguments being parsed, for error()

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._given = tuple(args or ())
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        import difflib  # an argument refused: a valid command line never needs it

        if "arguments are required: SCENARIO.yaml" in message:
            message += _taken_by_an_option(self._given)
        found = _INVALID.search(message)
        if found:
            choices = re.findall(r"'([^']*)'", found.group(2))
            given = found.group(1)
            same_case = [c for c in choices if c.lower() == given.lower()]
            close = same_case or difflib.get_close_matches(given.lower(), choices, n=1)
            if close:
                message += f" (did you mean '{close[0]}'?)"
        super().error(message)


def _taken_by_an_option(given: tuple[str, ...]) -> str:
    """' (--trace took x.yaml as its FILE: give the scenario first, ...)' where an option that
    takes an optional value stood before the only YAML file given."""
    for option, value in itertools.pairwise(given):
        if option == "--trace" and value.lower().endswith((".yaml", ".yml")):
            return (
                f" (--trace took {value} as its FILE: give the scenario first, e.g. "
                f"run {value} --trace)"
            )
    return ""
