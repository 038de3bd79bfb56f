"""Every key of a scenario file is described in docs/scenario-reference.md: the schema's
comment beside the field (or just above it), its Field description, or a section's docstring.
A key added without one fails here, named, so the reference never grows a blank row."""

from __future__ import annotations

from tiersim.cli.reference import scenario_reference


def _rows() -> list[list[str]]:
    """The reference table's rows as cells (key, type, default, note), split on unescaped |."""
    rows = []
    for line in scenario_reference().splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.replace("\\|", "\0").strip("|").split("|")
        rows.append([c.strip().replace("\0", "|") for c in cells])
    return rows


def test_the_table_is_read_whole():
    rows = _rows()
    assert all(len(r) == 4 for r in rows)
    keys = {r[0] for r in rows}
    # a few keys users set most, each a row of its own
    for key in ("`parallel.context_comm`", "`training.micro_batch_size`", "`checkpoint.mode`"):
        assert key in keys


def test_every_scenario_key_has_a_description():
    undescribed = [r[0] for r in _rows() if not r[3]]
    assert undescribed == [], "keys with no description in the schema:\n" + "\n".join(undescribed)
