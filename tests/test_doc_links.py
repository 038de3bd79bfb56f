"""Every relative link in README.md and docs/*.md leads to a file that exists, and every
#anchor to a heading of that page (GitHub's slug: lower case, punctuation dropped, spaces
to hyphens). docs/science.md and docs/commands.md linked `docs/hbf.md` from inside docs/,
i.e. docs/docs/hbf.md."""

from __future__ import annotations

import re

from docs_text import DOCS, README

LINK = re.compile(r"\]\(([\w./-]+\.(?:md|png|yaml|json|py|toml))(#[\w-]+)?\)")
FENCE = re.compile(r"```.*?```", re.S)


def _slugs(text: str) -> set[str]:
    heads = re.findall(r"^#+\s+(.+)$", FENCE.sub("", text), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_relative_link_resolves():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target, anchor in LINK.findall(FENCE.sub("", page.read_text())):
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor[1:] not in _slugs(path.read_text()):
                broken.append(f"{page.name}: {target}{anchor} (no such heading)")
    assert broken == []
