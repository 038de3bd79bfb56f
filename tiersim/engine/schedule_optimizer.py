"""The optimizer update in a schedule: after a step's last backward, unit by unit.

The optimizer runs where `optimizer_compute` says (GPU or CPU memory). For each unit, once its
gradient is final and the update is within `depth` units: the gradients, master weights and
optimizer state move to it (and, with no master copy, the weights it updates in place), the
updated state moves back to each class's home, and the new weights to theirs (with ZeRO-1/2
the all-gathered rest too). The rest unit goes first, then the layers in forward order.

`training.optimizer_step` says when: `synchronous` (DeepSpeed's and FSDP's `step()`, Megatron's
optimizer) starts the update once every gradient of the step is final, since clipping by the
global norm needs them all, and the next step once the update is done, its weights home and
its state written back; `pipelined` (engines that overlap the update with the next forward)
starts each unit's update once its own gradient is final, and the next step's use of a unit
waits for that unit's new weights only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.engine.ops import Op
from tiersim.state.classes import OPTIMIZER_KEPT

if TYPE_CHECKING:
    from tiersim.engine.schedule import _Builder


def optimizer_step(b: _Builder, step: int) -> None:
    """After the last backward: what is left of the pipeline (a later stage waits for stage
    0's last backward before the step's global synchronisation), then the update unit by
    unit, rest first (its embedding gradient is final only after the first layer's backward
    and, with tied embeddings over a pipeline, the first and last stage's all-reduce of it).
    Synchronous (`training.optimizer_step`): the update starts once every gradient is final
    (the global norm clipping needs) and the next step once all of it is done."""
    if b.use_units:
        b.use_units[-1] = -1  # weights change now: nothing staged survives the update
    last_backward = b.last_on.get("gpu")
    bubble = None
    if b.wl.bubble_after_s > 0:  # waiting for the pipeline's end
        bubble = b.add(Op("idle", "bubble", "pipeline end", step, [], duration=b.wl.bubble_after_s))
    n = len(b.wl.units)
    rest = b.wl.units[-1]
    # the first and last stage's all-reduce: both are done only when the pipeline is
    sync = b.net(rest.embedding_sync, step, [last_backward, b.grad_last[-1], bubble])
    synchronous = b.s.training.optimizer_step == "synchronous"
    if synchronous:  # nothing is read for the update before every gradient is final
        final = [last_backward, sync, bubble, *b.grad_last]
        all_final = b.add(Op("idle", "optimizer", "gradients final", step, final))
    done: list[list[int]] = []
    for u in [n - 1, *range(n - 1)]:
        gate = done[-b.depth - 1] if len(done) > b.depth else []
        extra = [last_backward, sync] if u == n - 1 else []
        start = [all_final, all_final] if synchronous else [bubble, *extra]
        done.append(_update(b, u, step, gate, start))
    if synchronous:  # the next step waits for the whole update
        every = [op for ops in done for op in ops] + b.weights_ready
        end = b.add(Op("idle", "optimizer", "optimizer step done", step, every))
        b.weights_ready = [end] * n


def _staged(
    b: _Builder, role: str, label: str, step: int, src: str, nbytes: int, deps: list[int | None]
) -> int | None:
    """Bring something the optimizer reads to where it runs (freed by the caller)."""
    return b.move(role, label, step, src, b.opt_at, nbytes, deps)


def _write_back(
    b: _Builder,
    cls: str,
    label: str,
    step: int,
    nbytes: int,
    deps: list,
    staged: int | None,
    held: int,
) -> int | None:
    """Move an updated class home; the staged copy is freed once it has been read out."""
    back = b.move(cls, label, step, b.opt_at, b.home[cls], nbytes, deps, alloc_dst=False)
    if staged is not None:
        b.free_after(back if back is not None else deps[0], b.opt_at, held)
    return back


def _fetch_state(
    b: _Builder, u: int, step: int, ready: list[int | None]
) -> tuple[int | None, dict[str, int | None], int | None]:
    """The unit's gradients, master weights and optimizer state (and, with no master copy,
    the weights it updates in place), brought to where the optimizer runs."""
    unit, home = b.wl.units[u], b.home
    grads = _staged(
        b,
        "gradients",
        f"gradients to optimizer {unit.name}",
        step,
        home["gradients"],
        unit.gradients_for_update,
        ready,
    )
    fetched = {}
    for cls in OPTIMIZER_KEPT:
        n = unit.homed[cls]
        deps = [b.state_ready.get((cls, u)), *ready]
        fetched[cls] = _staged(b, cls, f"fetch {cls} {unit.name}", step, home[cls], n, deps)
    in_place = unit.homed["master"] == 0 and unit.weights_updated > 0  # no master: read weights
    weights_in = _staged(
        b,
        "weights",
        f"weights for update {unit.name}",
        step,
        home["weights"],
        unit.weights_updated if in_place else 0,
        [b.weights_ready[u], *ready],
    )
    return grads, fetched, weights_in


def _update(b: _Builder, u: int, step: int, gate: list[int], start: list[int | None]) -> list:
    """One unit's update: what it reads is fetched once its gradient is final and the
    optimizer is within `depth` units (gate: those units' last write-backs), what it wrote
    goes home. start: [the pipeline bubble or None, then what else the gradient's finality
    awaits]. Returns the ops after which this unit's staged state is freed."""
    unit = b.wl.units[u]
    final = [b.grad_last[u], *start[1:]]  # start[0], the bubble, holds only the update
    grads, fetched, weights_in = _fetch_state(b, u, step, [*final, *gate])
    guard = b.snapshot_guard.pop(u, [])  # a checkpoint still reading this version
    kind = b.s.placement.optimizer_compute
    op = b.add(
        Op(
            kind,
            "optimizer",
            f"optimizer {unit.name}",
            step,
            [*final, start[0], grads, *fetched.values(), weights_in, *guard],
            duration=unit.optimizer_gpu_s if kind == "gpu" else unit.optimizer_cpu_s,
        )
    )
    if grads is not None:
        b.free_after(op, b.opt_at, unit.gradients_for_update)
    released = [op]
    for cls in OPTIMIZER_KEPT:
        n = unit.homed[cls]
        back = _write_back(b, cls, f"write back {cls} {unit.name}", step, n, [op], fetched[cls], n)
        b.state_ready[(cls, u)] = back if back is not None else op
        released.append(back)
    new_w = _write_back(
        b,
        "weights",
        f"updated weights {unit.name}",
        step,
        unit.weights_updated,
        [op],
        weights_in,
        unit.weights_updated,
    )
    released.append(new_w)
    b.weights_ready[u] = _gather_parameters(b, u, step, new_w if new_w is not None else op)
    return [r for r in released if r is not None]


def _gather_parameters(b: _Builder, u: int, step: int, updated: int) -> int:
    """ZeRO-1/2: all-gather the updated weights from every rank's shard; where the weights
    live off the GPU, the gathered rest is written home too."""
    unit = b.wl.units[u]
    if unit.dp_parameters is None:
        return updated
    off_gpu = b.home["weights"] != b.gpu
    gathered = b.net(
        unit.dp_parameters,
        step,
        [updated],
        alloc=[(b.gpu, unit.weights_full)] if off_gpu else [],
    )
    if not off_gpu:
        return gathered
    rest = max(0, unit.weights_full - unit.weights_updated)
    push = b.move(
        "weights",
        f"gathered weights home {unit.name}",
        step,
        b.gpu,
        b.home["weights"],
        rest,
        [gathered],
        alloc_dst=False,
    )
    last = push if push is not None else gathered
    b.free_after(last, b.gpu, unit.weights_full)
    return last
