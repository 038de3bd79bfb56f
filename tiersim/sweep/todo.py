"""Which of a sweep's points run: on a resume, those not recorded, those that failed (once
more), and those whose report was deleted from points/ since."""

from __future__ import annotations

import sys
from typing import TextIO

from tiersim.core.errors import one_line
from tiersim.sweep.store import ERROR, OK, SweepStore


def points_to_run(keys: list[str | None], store: SweepStore) -> tuple[list[int], int]:
    """(positions to run, how many are retries): points not recorded, and failed ones again.

    Only this sweep's points are dropped from the log: those of a grid since shrunk stay.
    """
    retry = {k for k in keys if k is not None and store.entries.get(k, {}).get("status") == ERROR}
    store.forget(retry | unreported(keys, store))
    todo = [i for i, key in enumerate(keys) if key is None or key not in store.entries]
    return todo, sum(keys[i] in retry for i in todo)


def unreported(keys: list[str | None], store: SweepStore) -> set[str]:
    """This sweep's points recorded as run (ok) whose report is no longer in points/ (deleted
    since): a row without its report would be a figure nobody can check, so they run again."""
    return {
        key
        for key in keys
        if key is not None
        and store.entries.get(key, {}).get("status") == OK
        and not (store.points_dir / f"{key}.json").is_file()
    }


def say_unreported(keys: list[str | None], store: SweepStore, progress: TextIO | None) -> None:
    missing = len(unreported(keys, store))
    if missing:
        note = (
            f"note: {missing} report(s) missing from {store.points_dir} (deleted since the "
            "sweep ran them): their points are run again"
        )
        print(one_line(note), file=progress or sys.stderr)
