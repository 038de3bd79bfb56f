"""docs/commands.md lists every command and every one of its options, and each has help text."""

from docs_text import page

from tiersim.cli import build_parser

README = page("commands")


def _commands():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sub.choices.items()


def test_every_command_and_option_is_in_the_readme_with_help():
    for name, command in _commands():
        assert f"`tiersim {name}" in README, name
        assert command.description, name
        for action in command._actions:
            if "-h" in action.option_strings:
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help text"
            for option in action.option_strings:
                assert option in README, f"tiersim {name} {option}"


def test_every_command_the_pages_name_exists():
    """docs/link-bytes.md sent readers to `tiersim layout`, a command tiersim never had (the
    mesh's strides are in the table `tiersim inventory` prints)."""
    import re

    from docs_text import every_page

    named = set(re.findall(r"`(?:\.venv/bin/)?tiersim ([a-z][a-z-]*)", every_page()))
    assert named and named <= {name for name, _ in _commands()}, named
