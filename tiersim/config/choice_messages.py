"""A refused value's message made plain: a union's branches said in one sentence, and the
choice a value was closest to (tiersim.config.messages says each error with these)."""

from __future__ import annotations

import re
from typing import Any


def closest(code: str, msgs: list[str], value: Any) -> str:
    """' (did you mean 'megatron'?)' after a choice refused for a value close to one (a typo,
    another case: 'megatorn', 'AdamW'; 'atuo' where a number or 'auto' is taken), as an
    unknown key gets; '' where none is close."""
    import difflib  # a name refused: a valid file never needs it

    # E-TYPE: a union of a number and a word ('auto') refuses a word as a type, still a choice
    chosen = code == "E-CHOICE" and (isinstance(value, str) or value is None)
    if not chosen and not (code == "E-TYPE" and isinstance(value, str)):
        return ""
    names = [n.strip("'") for m in msgs for n in _CHOICE.findall(_GOT.sub("", m))]
    if value is None:  # YAML's null (or ~) where the key has a choice spelt 'none'
        return " (did you mean 'none'? null is YAML's no value)" if "none" in names else ""
    same_case = [n for n in names if n.lower() == value.lower()]
    # a word for a choice before spelling: 'sync' is one letter from 'async', its opposite
    meant = [n for n in names if SYNONYMS.get(value.lower()) == n]
    close = same_case or meant
    close = close or difflib.get_close_matches(value.lower(), names, n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close and close[0] != value else ""


# words users write for a choice spelt otherwise (checkpoint.mode, placement.optimizer_compute)
SYNONYMS = {
    "sync": "blocking",
    "synchronous": "blocking",
    "asynchronous": "async",
    "host": "cpu",
    "device": "gpu",
    "cuda": "gpu",
}


_GOT = re.compile(r" \(got [^()]*\)$")
_SHOULD = "input should be "


def alternatives(msgs: list[str]) -> str:
    """One value's refusals by each branch of a union, in one sentence where they quote the
    same value: `input should be greater than 0 or 'auto' (got 0)`, not the value twice."""
    got = {m[match.start() :] if (match := _GOT.search(m)) else None for m in msgs}
    if len(msgs) < 2 or len(got) != 1 or None in got:
        return "; or ".join(msgs)
    (suffix,) = got
    parts = [m.removesuffix(suffix) for m in msgs]
    if not all(p.startswith(_SHOULD) for p in parts):
        return "; or ".join(msgs)
    options = [p.removeprefix(_SHOULD) for p in parts]
    # the branches' choices as one list: 'a', 'b' or 'c', not 'a' or 'b' or 'c'
    if all(_CHOICES.fullmatch(o) for o in options):
        names = [n for o in options for n in _CHOICE.findall(o)]
        return f"{_SHOULD}{', '.join(names[:-1])} or {names[-1]}{suffix}"
    return _SHOULD + " or ".join(options) + suffix


_CHOICE = re.compile(r"'[^']*'")
_CHOICES = re.compile(r"'[^']*'(, '[^']*')*( or '[^']*')?")
