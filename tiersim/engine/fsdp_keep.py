"""FSDP2's units kept whole from a forward to their backward (`reshard_after_forward: false`,
and the whole model's root, workload/whole_model.py: engine/schedule_passes.py
`TrainingPasses.keeps`): a unit gathered by a forward stays whole to its backward, no
all-gather there, then resharded (_fsdp_param_group.py: `reshard` returns in FORWARD when not
resharding after forward; `post_backward` reshards). One copy that the micro-batches in
flight share, gathered by the first forward that needs it and resharded after the last
backward that holds it. `passes` is the TrainingPasses building the step."""

from __future__ import annotations


def gather_kept(passes, u: int, step: int, mb: int) -> int | None:
    """A kept unit's weights for a forward: gathered unless another micro-batch's
    forward already holds them whole (FSDP2's unshard is then a no-op)."""
    if u in passes.kept:
        passes.kept[u][2] += 1
        return passes.kept[u][0]
    w, held = passes.fetch_weights(u, step, "fwd", mb)
    passes.kept[u] = [w, passes.uses[-1] if held else None, 1]
    return w


def reshard_kept(passes, u: int, at: int) -> None:
    """A kept unit's backward `at` done: resharded once no micro-batch in flight holds
    it (the free moved here from the use that held it, if its gather was skipped)."""
    entry = passes.kept[u]
    entry[2] -= 1
    if entry[2]:
        return
    del passes.kept[u]
    unit = passes.c.wl.units[u]
    if entry[1] is not None:
        passes.ops.move_free(entry[1], at, passes.c.gpu, unit.weights_full)
    else:
        passes.ops.free_after(at, passes.c.gpu, unit.weights_full)
