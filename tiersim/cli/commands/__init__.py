"""One module per CLI command; each offers `add_parser(subparsers)` and sets `handler`.

A command's module is imported only when that command (or the whole list, for `tiersim
--help` or a name not known) is wanted: `tiersim run` need not load calibrate's,
measure's or check-published's modules and what they import."""

from __future__ import annotations

import importlib
from types import ModuleType

# each command's name -> its module here, in the order `tiersim --help` lists them
MODULES = {
    "run": "run",
    "inventory": "inventory",
    "wear": "wear",
    "sweep": "sweep",
    "validate": "validate",
    "check-published": "check_published",
    "measure": "measure",
    "plan": "plan",
    "calibrate": "calibrate",
    "presets": "presets",
    "compare": "compare",
    "import": "import_config",
}


def command_module(name: str) -> ModuleType:
    """The module of the command `name` (one of MODULES), imported now if not yet."""
    return importlib.import_module(f"{__name__}.{MODULES[name]}")
