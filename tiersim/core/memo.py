"""Values worked out once for the object they are of, while it is the latest one asked about.

A point's build asks for some pure functions of its resolved scenario more than once (a
layer's kernels: by its unit, by the step's breakdown and by the pipeline's stage times). An
`OwnerMemo` keeps what it was asked for one owner (a `Resolved`) and starts again, empty, for
the next: it never serves one point what another worked out, so the first evaluation of a
scenario costs what every later one of the same scenario does (no cache by value: that would
time the cache, docs/speed.md). A key may name an object by its id; the entry holds that
object, so that the id cannot be another object's while the entry lives. Safe to share
between threads: each reads the slot once and writes only into its own owner's dict.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class OwnerMemo:
    """`get(owner, key, held, make)`: `make()` once per `key` for the latest `owner`."""

    def __init__(self) -> None:
        self._slot: tuple[Any, dict] = (None, {})

    def get(self, owner: Any, key: Hashable, held: Any, make: Callable[[], T]) -> T:
        """`make()`'s value for `key` of `owner`, worked out once while `owner` is the latest
        asked about; `held`: the object `key` names by id (kept alive with the entry)."""
        slot = self._slot
        if slot[0] is not owner:
            slot = (owner, {})
            self._slot = slot
        entry = slot[1].get(key)
        if entry is None or entry[0] is not held:
            entry = slot[1][key] = (held, make())
        return entry[1]
