"""Issue 38's matrix (groundtruth/matrix_cells.py) measured in few steps: on one group of gloo
ranks a world size (forked once: one torch import, one process group for all its cells), the
cells that differ only in recompute share one model, one optimizer and one warm-up step.

Why that is the same measurement as a fresh model a cell (groundtruth/fsdp2_step.py's
record_rank_step): what a recorded step starts from is the rank's shards of the weights, the
gradients (kept: `zero_grad(set_to_none=False)`) and the optimizer's state, none of which
depends on the recompute the steps before it ran; recompute is a flag read as each layer and
attention core runs (fsdp2_step.set_recompute), so the next step runs as a model built with it
would. Each recorded step still starts from the state it measures against (its `base` taken
then) and must leave nothing allocated (StepPeaks.left_bytes 0). Checked against one fresh
model a cell over all 162 cells (benchmarks/fsdp2_matrix.py --fresh): docs/issue38-status.md.

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from tiersim.config.schema import Scenario
from tiersim.groundtruth.fsdp2_step import (
    outcome,
    recorded_step,
    run_on_ranks,
    set_recompute,
    sharded_model,
)
from tiersim.groundtruth.matrix_cells import RECOMPUTE, Cell, cell_scenario
from tiersim.groundtruth.step_peaks import StepPeaks
from tiersim.groundtruth.step_timeline import train_step
from tiersim.groundtruth.torchmodels import make_optimizer

# The models whose step allocates the same bytes whatever its weights' values: no routing
# (the MoE model's experts take the tokens its router's values send them).
VALUE_FREE = ("dense", "gqa")
# Muon's Newton-Schulz iterations that give the same StepPeaks as torch's 5 on those models:
# iteration 1 starts from X alone; from iteration 2 on each one allocates and frees the same
# tensors (the same shapes; on DTensors the same collectives an iteration, as
# state/muon_sharded.py counts them) beside the last one's Gram matrix and A + A·A, held
# until replaced, so iterations 3-5 repeat iteration 2's allocations and add no new peak.
# One iteration is not enough (the optimizer phase of the 1-rank GQA bf16 cells 123,872 B
# lower). Checked cell for cell on 1, 2 and 4 ranks, in both orders (docs/suite-time.md).
NS_STEPS_SAME_PEAKS = 2


def newton_schulz_steps(optimizer: Any, steps: int) -> None:
    """torch.optim.Muon's `ns_steps` set to `steps` in every Muon part of `optimizer`."""
    for part in getattr(optimizer, "parts", [optimizer]):
        if isinstance(part, torch.optim.Muon):
            for group in part.param_groups:
                group["ns_steps"] = steps


def record_group(
    scenarios: list[Scenario], dtype: str, ns_steps: int | None = None
) -> list[dict | None]:
    """On this rank: one model of the scenarios (alike but for `training.recompute`) in
    `dtype`, its optimizer (Muon's Newton-Schulz run `ns_steps` times where given, else
    torch's default 5), a warm-up step, then one recorded step a scenario, its recompute
    set first. An error PyTorch raises is every remaining scenario's outcome (every rank
    raises it alike, so the ranks go on together)."""
    got: list[dict | None] = []
    try:
        net, ids = sharded_model(scenarios[0], dtype)
        kernel = net.config._attn_implementation
        named = list(net.named_parameters())
        optimizer = make_optimizer(scenarios[0].training.optimizer, named)
        if ns_steps is not None:
            newton_schulz_steps(optimizer, ns_steps)
        set_recompute(net, scenarios[0].training.recompute, kernel)
        train_step(net, [optimizer], ids, recorded=False)  # warm-up: the optimizer state exists
        for s in scenarios:
            set_recompute(net, s.training.recompute, kernel)
            step = recorded_step(net, optimizer, ids)
            got.append(step.__dict__ if step else None)
    except RuntimeError as e:
        got += [{"error": f"{type(e).__name__}: {e}"}] * (len(scenarios) - len(got))
    return got


def matrix_tasks(
    cells: list[Cell], world: int, ns_steps: int | None = None
) -> tuple[list[Cell], list[Callable[[], list]]]:
    """The cells in the order their steps run (grouped by model, dtype and optimizer; within a
    group, recompute none, selective, full) and one task a group for fsdp2_step.run_on_ranks.
    `ns_steps` (where given) is Muon's Newton-Schulz iterations for the models whose
    allocations do not depend on the weights' values (VALUE_FREE): see NS_STEPS_SAME_PEAKS."""
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in sorted(cells, key=lambda c: RECOMPUTE.index(c[1])):
        groups.setdefault((cell[0], cell[2], cell[3]), []).append(cell)
    order = [cell for group in groups.values() for cell in group]
    tasks = [
        partial(
            record_group,
            [cell_scenario(c, world) for c in group],
            dtype,
            ns_steps if name in VALUE_FREE else None,
        )
        for (name, dtype, _), group in groups.items()
    ]
    return order, tasks


def record_matrix(cells: list[Cell], world: int) -> dict[Cell, StepPeaks | str]:
    """Rank 0's recorded step of each cell on `world` gloo ranks (the error PyTorch raised,
    where it refused one)."""
    order, tasks = matrix_tasks(cells, world)
    return dict(zip(order, map(outcome, run_on_ranks(tasks, world)), strict=True))
