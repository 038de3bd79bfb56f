"""Issue 38's whole matrix measured once: all 162 cells (groundtruth/matrix_cells.py: dense,
GQA, shared-expert MoE x recompute none / selective / full x fp32 / bf16 x AdamW / 8-bit AdamW
/ Muon x FSDP2 on 1, 2, 4 gloo ranks), rank 0's whole-step peak measured (torch.profiler's
memory events) beside tiersim's timeline for the CPU. Prints a Markdown table (measured,
predicted, predicted / measured - 1, the phases) and each world size's wall and CPU time.

    nice .venv/bin/python benchmarks/fsdp2_matrix.py            # as the tests measure it
    nice .venv/bin/python benchmarks/fsdp2_matrix.py --fresh    # and one fresh model a cell

With --fresh each cell is measured a second time as groundtruth/fsdp2_step.py's
record_fsdp_outcomes does (a model, an optimizer and a warm-up step a cell), and the table
says where the two measurements differ (groundtruth/fsdp2_matrix.py says why they should
not). A few minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import time

from tiersim.groundtruth.fsdp2_matrix import record_matrix
from tiersim.groundtruth.fsdp2_step import record_fsdp_outcomes
from tiersim.groundtruth.matrix_cells import CELLS, WORLDS, cell_name, cell_scenario
from tiersim.groundtruth.step_peaks import StepPeaks
from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline


def timed(fn, *args):
    """fn(*args), its wall seconds and the CPU seconds of this process and its children."""
    t0, c0 = time.perf_counter(), os.times()
    got = fn(*args)
    c1 = os.times()
    cpu = sum(c1[:4]) - sum(c0[:4])
    return got, time.perf_counter() - t0, cpu


def fresh(cells, world):
    jobs = [(cell_scenario(c, world), c[2]) for c in cells]
    return dict(zip(cells, record_fsdp_outcomes(jobs, world), strict=True))


def row(cell, world, m: StepPeaks | str, other: StepPeaks | str | None) -> tuple[str, float]:
    if isinstance(m, str):
        return f"| {cell_name(cell, world)} | refused: {m.splitlines()[0]} | | | | | | |", 0.0
    p = predicted_peaks(predicted_timeline(cell_scenario(cell, world)))
    error = p.peak_bytes / m.peak_bytes - 1
    same = ""
    if isinstance(other, StepPeaks):
        same = "same" if other == m else f"fresh {other.peak_bytes:,} B {other.peak_phase}"
    cells = [
        cell_name(cell, world),
        f"{m.peak_bytes:,} B",
        f"{p.peak_bytes:,} B",
        f"{error:+.2%}",
        f"{m.peak_phase} / {p.peak_phase}",
        f"{p.phase_peaks['optimizer'] / m.phase_peaks['optimizer'] - 1:+.2%}",
        f"{m.left_bytes:,} B",
        same,
    ]
    return "| " + " | ".join(cells) + " |", error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="also one fresh model a cell")
    parser.add_argument("--worlds", default="1,2,4", help="world sizes, comma-separated")
    args = parser.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    assert set(worlds) <= set(WORLDS)
    print("| cell | measured | predicted | error | phase (measured / predicted) "
          "| optimizer phase's error | left | fresh model |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    errors, times = [], []
    for world in worlds:
        shared, wall, cpu = timed(record_matrix, CELLS, world)
        times.append(f"{world} ranks: shared {wall:.1f} s wall, {cpu:.1f} s CPU")
        others = {}
        if args.fresh:
            others, wall, cpu = timed(fresh, CELLS, world)
            times[-1] += f"; fresh {wall:.1f} s wall, {cpu:.1f} s CPU"
        for cell in CELLS:
            line, error = row(cell, world, shared[cell], others.get(cell))
            print(line, flush=True)
            errors.append((error, cell_name(cell, world)))
    print()
    print(f"errors: {min(errors)[0]:+.2%} ({min(errors)[1]}) to {max(errors)[0]:+.2%} "
          f"({max(errors)[1]})")  # fmt: skip
    print("\n".join(times))


if __name__ == "__main__":
    main()
