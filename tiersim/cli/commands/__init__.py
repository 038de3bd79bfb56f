"""One module per CLI command; each offers `add_parser(subparsers)` and sets `handler`."""

from tiersim.cli.commands import (
    calibrate,
    check_published,
    compare,
    import_config,
    inventory,
    measure,
    plan,
    presets,
    run,
    sweep,
    validate,
    wear,
)

COMMANDS = [
    run,
    inventory,
    wear,
    sweep,
    validate,
    check_published,
    measure,
    plan,
    calibrate,
    presets,
    compare,
    import_config,
]
