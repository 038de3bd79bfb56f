"""docs/scenario-reference.md gives the default a file without `hardware:` runs on: it said
`hardware` was required and `hardware.preset` null, where such a file runs on h200-hbf
(docs/scenarios.md: "The default hardware preset (`h200-hbf`)")."""

from __future__ import annotations

from docs_text import page


def _row(path: str) -> list[str]:
    line = next(x for x in page("scenario-reference").splitlines() if x.startswith(f"| `{path}` "))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_the_reference_gives_the_default_hardware(cli_json, tmp_path):
    path = tmp_path / "nohw.yaml"
    path.write_text("name: nohw\nmodel: {preset: gpt2}\ntraining: {micro_batch_size: 1}\n")
    report = cli_json(path)
    # h200-hbf: HBM of 139.80 GiB as CUDA gives it (docs/scenarios.md) and an HBF tier
    assert report["tiers"]["hbm"]["capacity_bytes"] == 150_108_897_280
    assert "hbf" in report["tiers"]
    assert "h200-hbf" in _row("hardware.preset")[2] and "null" not in _row("hardware.preset")[2]
    assert _row("hardware")[2] != "required"
