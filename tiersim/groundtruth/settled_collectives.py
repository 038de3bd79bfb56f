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
was issued; it falls back only once the work, and everything it holds, is gone (wherever it
goes: the storage outlives it, since the caller still holds it). `settle` waits for exactly
that, bounded by SETTLE_S, past which it raises: a worker that never lets go is a bug to see,
not a figure to record. The old way, a fixed 2 ms sleep after each wait, raced whenever the
worker waited longer than that for a core (docs/suite-time.md).

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

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


def settle(kept: torch.Tensor, issue: Callable[[torch.Tensor], Wait], what: str) -> None:
    """Issue a collective on a fresh view of `kept` (`issue` returns its wait), wait for it,
    then until the work has let go of the view: the storage's use count back to its count
    before the collective was issued. Raises UnsettledCollectiveError where the work holds no
    view (nothing to wait for) or still holds it SETTLE_S after finishing."""
    uses = storage_uses(kept)
    wait = issue(kept.view(kept.shape))
    # the work is held until its wait (by the caller, or the functional collectives'
    # registry), so a work that holds the view shows here, whatever the worker has done
    if storage_uses(kept) <= uses:
        raise UnsettledCollectiveError(
            f"{what}: the collective's work holds no view of its tensor (storage use count "
            f"{storage_uses(kept)}, {uses} before it was issued): its release cannot be seen"
        )
    wait()
    del wait  # the caller's reference to the work, where it holds one
    deadline = time.monotonic() + SETTLE_S
    while storage_uses(kept) > uses:
        if time.monotonic() > deadline:
            raise UnsettledCollectiveError(
                f"{what}: gloo's worker still holds the collective's tensors {SETTLE_S:g} s "
                f"after it finished (storage use count {storage_uses(kept)}, {uses} before "
                "it was issued)"
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

    settle(out, issue, "all_reduce")
    return out


def _all_gather_single(self: torch.Tensor, gather_dim: int, group, tag: str = "") -> torch.Tensor:
    """funcol.all_gather_single (torch 2.13), its `_c10d_functional::all_gather_into_tensor`
    given a view of the (contiguous) input, which the work holds beside its output's chunks;
    returned once settled, cut and joined along `gather_dim` as funcol does."""
    group = funcol._resolve_group(group, tag)
    size = funcol.c10d._get_group_size_by_name(group)
    name = funcol._group_or_group_name(group)
    gathered: list[torch.Tensor] = []

    def issue(view: torch.Tensor) -> Wait:
        gathered.append(torch.ops._c10d_functional.all_gather_into_tensor(view, size, name))
        return lambda: funcol.wait_tensor(gathered[0])

    settle(self, issue, "all_gather")
    if gather_dim != 0:
        return _maybe_view_chunk_cat(gathered[0], size, gather_dim)
    return gathered[0]


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
