"""docs/cli-reference.md and docs/scenario-reference.md are what the code makes of its parsers
and its schema (`python -m tiersim.cli.reference` rewrites them): a new option or key without
its page rewritten fails here, so neither page can go stale."""

from __future__ import annotations

import pytest
from docs_text import DOCS, page

from tiersim.cli.reference import PAGES, main, pages


@pytest.fixture(scope="module")
def made() -> dict[str, str]:
    return pages()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_what_the_code_makes(made, name):
    assert (DOCS / name).read_text() == made[name], (
        f"docs/{name} is stale: run `.venv/bin/python -m tiersim.cli.reference`"
    )


def test_every_command_has_its_help_on_the_cli_page():
    text = page("cli-reference")
    for command in ("run", "inventory", "wear", "sweep", "validate", "plan", "compare"):
        assert f"## `tiersim {command}`" in text
    assert "--set PATH=VALUE" in text  # an option that several commands share


def test_the_scenario_page_names_nested_and_named_entries():
    # keys written out by hand from DESIGN.md §2's outline: a section's key, a key of a named
    # tier, and a key two sections deep
    text = page("scenario-reference")
    for key in (
        "training.micro_batch_size",
        "hardware.tiers.<name>.write_bandwidth",
        "training.precision.master",
        "checkpoint.every_steps",
    ):
        assert f"| `{key}` |" in text, key


def test_check_mode_names_a_stale_page(tmp_path, capsys):
    (tmp_path / "cli-reference.md").write_text("old\n")
    assert main(["--docs", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path}/cli-reference.md: differs from the code" in out
    assert f"{tmp_path}/scenario-reference.md: differs from the code" in out
    assert main(["--docs", str(tmp_path)]) == 0
    assert main(["--docs", str(tmp_path), "--check"]) == 0


def test_the_cli_page_names_no_checkout_path(made):
    # a default under the checkout is written from it (<checkout>/...), so the page is the same
    # in every clone whatever its depth (a long path was wrapped across lines before)
    from docs_text import ROOT

    assert str(ROOT) not in made["cli-reference.md"]
    assert "<checkout>/scenarios/published" in made["cli-reference.md"]
