"""Collectives that return only once gloo's worker thread has let go of their tensors, so that
the profiler, which records one thread's allocations, sees every free where the recording
thread makes it (groundtruth/fsdp2_step.py, groundtruth/muon_dtensor.py).

gloo runs each collective on a worker thread of its own (ProcessGroupGloo::runLoop): the worker
keeps the finished work, and with it every tensor the work holds, until it loops for the next
one, which may be after the caller's wait has returned. A tensor whose last reference the
worker drops is freed there, unseen, and the recorded step counts it as never freed.

How `settle` knows, without guessing a time: the caller keeps a tensor of the collective's
storage and hands the collective a fresh view of it. A view is a tensor of its own, so while
the work holds it the storage's use count is one above the count taken before the collective
was issued (an all-gather's input and output both: a work may let go of them apart); it falls
back only once the work, and everything it holds, is gone (wherever it goes: the storage
outlives it, since the caller still holds it). `settle` waits for exactly that, bounded by
SETTLE_S, past which it raises: a worker that never lets go is a bug to see, not a figure to
record. The old way, a fixed 2 ms sleep after each wait, raced whenever the worker waited
longer than that for a core (docs/suite-time.md).

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.distributed._functional_collectives as funcol
from torch._utils import _maybe_view_chunk_cat

SETTLE_S = 30.0  # at most this long for the worker to let go (it takes microseconds)
SETTLE_POLL_S = 1e-4  # asleep between looks, so that the worker gets a core

Wait = Callable[[], object]  # waits for the issued collective to finish


class UnsettledCollectiveError(Exception):
    """The collective's work cannot be seen to let go (not a RuntimeError: the FSDP2 ground
    truth records a RuntimeError raised in a step as what PyTorch refuses, not as a failure)."""


def storage_uses(t: torch.Tensor) -> int:
    """References to the storage behind `t` (each tensor or view holding it counts one)."""
    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


def _still_held(kept: Sequence[torch.Tensor], uses: list[int]) -> tuple[int, int] | None:
    """(use count, count before) of the first of `kept` a work still holds a view of."""
    for t, before in zip(kept, uses, strict=True):
        if storage_uses(t) > before:
            return storage_uses(t), before
    return None


def settle(kept: Sequence[torch.Tensor], issue: Callable[..., Wait], what: str) -> None:
    """Issue a collective on a fresh view of each of `kept` (its input, its output: `issue`
    takes the views in that order and returns the collective's wait), wait for it, then until
    the work has let go of every view: each storage's use count back to its count before the
    collective was issued. Both sides are watched, since a work may hold its input and its
    output by different objects and let go of them at different times (gloo's all-gather did:
    its output, freed on the worker, once in 30 steps). Raises UnsettledCollectiveError where
    the work holds no view of a tensor (nothing to wait for) or still holds one SETTLE_S after
    finishing."""
    uses = [storage_uses(t) for t in kept]
    wait = issue(*(t.view(t.shape) for t in kept))
    # the work is held until its wait (by the caller, or the functional collectives'
    # registry), so a work that holds a view shows here, whatever the worker has done
    for t, before in zip(kept, uses, strict=True):
        if storage_uses(t) <= before:
            raise UnsettledCollectiveError(
                f"{what}: the collective's work holds no view of its tensor (storage use count "
                f"{storage_uses(t)}, {before} before it was issued): its release cannot be seen"
            )
    wait()
    del wait  # the caller's reference to the work, where it holds one
    deadline = time.monotonic() + SETTLE_S
    while held := _still_held(kept, uses):
        if time.monotonic() > deadline:
            count, before = held
            raise UnsettledCollectiveError(
                f"{what}: gloo's worker still holds the collective's tensors {SETTLE_S:g} s "
                f"after it finished (storage use count {count}, {before} before it was issued)"
            )
        time.sleep(SETTLE_POLL_S)


def _all_reduce(self: torch.Tensor, reduceOp: str, group, tag: str = "") -> torch.Tensor:
    """funcol.all_reduce as torch 2.13's `_c10d_functional::all_reduce` runs it (Functional.cpp:
    a contiguous clone, all-reduced in place by `all_reduce_`), the clone kept here and the
    in-place collective given a view of it; returned once settled (no AsyncCollectiveTensor:
    DTensor takes a plain tensor, as it does while tracing)."""
    name = funcol._group_or_group_name(funcol._resolve_group(group, tag))
    out = self.clone(memory_format=torch.contiguous_format)

    def issue(view: torch.Tensor) -> Wait:
        torch.ops._c10d_functional.all_reduce_(view, reduceOp.lower(), name)
        return lambda: funcol.wait_tensor(out)  # the work is registered by storage

    settle((out,), issue, "all_reduce")
    return out


def _all_gather_single(self: torch.Tensor, gather_dim: int, group, tag: str = "") -> torch.Tensor:
    """funcol.all_gather_single (torch 2.13) as `_c10d_functional::all_gather_into_tensor` runs
    it (Functional.cpp: the output allocated with `at::empty`, [group size x rows, ...], then
    `all_gather_into_tensor_out`), the output allocated here and the collective given a view of
    it and of the input, both watched; returned once settled, cut and joined along
    `gather_dim` as funcol does."""
    group = funcol._resolve_group(group, tag)
    size = funcol.c10d._get_group_size_by_name(group)
    name = funcol._group_or_group_name(group)
    out = torch.empty((size * self.shape[0], *self.shape[1:]), dtype=self.dtype)

    def issue(view_in: torch.Tensor, view_out: torch.Tensor) -> Wait:
        torch.ops._c10d_functional.all_gather_into_tensor_out(view_in, size, name, out=view_out)
        return lambda: funcol.wait_tensor(out)  # the work is registered by storage

    settle((self, out), issue, "all_gather")
    if gather_dim != 0:
        return _maybe_view_chunk_cat(out, size, gather_dim)
    return out


@contextlib.contextmanager
def settled_collectives() -> Iterator[None]:
    """DTensor's functional collectives (the all-reduces and all-gathers of its
    redistributions, as Muon's step runs them) settled: each returns once gloo's worker has let
    go of its tensors."""
    saved = funcol.all_reduce, funcol.all_gather_single
    funcol.all_reduce, funcol.all_gather_single = _all_reduce, _all_gather_single
    try:
        yield
    finally:
        funcol.all_reduce, funcol.all_gather_single = saved
