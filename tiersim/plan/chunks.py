"""A large space's candidates checked on the sweep's workers, a chunk of the space's positions
a task (tiersim.plan.prune's checks, the same in each), merged here in the space's order so
that the first of equal scenarios is the one kept, as one process checking them all keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiersim.core.records import record
from tiersim.plan.prune import Pruned, prune
from tiersim.plan.space import Space, candidates
from tiersim.sweep.execute import Pool, SweepAborted, run_on_pool, stream

# positions a task: a few seconds of checking (about 1 ms each), a multiple of the values a
# last key usually has (so the choices that share their checks stay in one chunk)
CHUNK = 3_072


@record
class Chunk:
    raw: dict[str, Any]
    base_dir: str
    source: str
    space: Space
    start: int
    stop: int


def check_chunk(chunk: Chunk) -> Pruned:
    """The candidates at the chunk's positions, checked (tiersim.plan.prune)."""
    combos = candidates(chunk.space, chunk.start, chunk.stop)
    return prune(chunk.raw, Path(chunk.base_dir), chunk.source, combos)


def prune_on_pool(
    raw: dict[str, Any],
    base_dir: Path,
    source: str,
    space: Space,
    run: tuple[str, int, str | None],
    progress: Callable[[int], None],
    received: Callable[[int], None] = lambda positions: None,
) -> Pruned:
    """Every candidate of `space` checked on a pool of `run` = (executor, workers,
    scheduler), as `prune` checks them in one process; `progress(positions checked)` (those
    merged, in order), `received(positions)` (every chunk back so far, in any order: the
    rate of the check, which --time-limit bounds, tiersim.plan.checking)."""
    folder = str(base_dir.resolve())
    chunks = [
        Chunk(raw, folder, source, space, start, min(start + CHUNK, space.size))
        for start in range(0, space.size, CHUNK)
    ]
    parts: dict[int, Pruned] = {}
    out = Pruned(base=(raw, folder, source))

    def on(pool: Pool) -> None:
        merged = 0  # chunks merged, in order
        back = 0  # positions received
        for batch in stream(pool, check_chunk, chunks):
            for position, part in batch:
                if not isinstance(part, Pruned):
                    raise SweepAborted(f"a worker failed: {type(part).__name__}: {part}")
                parts[position] = part
                back += chunks[position].stop - chunks[position].start
            while merged in parts:
                out.merge(parts.pop(merged))
                merged += 1
            progress(min(space.size, merged * CHUNK))
            received(back)

    executor, workers, scheduler = run
    run_on_pool(executor, workers, scheduler, None, on)
    return out
