"""The project's documentation as the tests read it: the README and the pages under docs/
(the README leads to the pages; a test of what the docs say reads the page that says it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """One page: "README" or a page of docs/ by its file name without `.md`."""
    return (README if name == "README" else DOCS / f"{name}.md").read_text()


def every_page() -> str:
    """The README and every page of docs/, one after the other."""
    pages = [README, *sorted(DOCS.glob("*.md"))]
    return "\n".join(p.read_text() for p in pages)
