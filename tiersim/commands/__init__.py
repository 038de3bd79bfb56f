"""One module per CLI command; each offers `add_parser(subparsers)` and sets `handler`."""

from tiersim.commands import inventory, run, validate

COMMANDS = [run, inventory, validate]
