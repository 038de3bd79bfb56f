"""groundtruth/settled_collectives.py's `settle`: a collective returns only once its work has
let go of the view it was given (the storage's use count back to its count before the
collective was issued), whichever thread lets go and whenever; a work that holds no view, or
never lets go, is an error, never a hang. Stand-in works here (a list holding the view, a timer
thread dropping it: gloo's worker); the real ones are gloo's, in tests/test_muon_sharded.py and
tests/test_fsdp2_step.py (every free seen: left_bytes 0)."""

from __future__ import annotations

import re
import threading

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")


def test_a_collective_returns_after_its_worker_lets_go_not_after_its_wait():
    """The wait returns first; the worker lets go of the view later, on its own thread: `settle`
    returns only after that, with the storage's use count back to the caller's alone."""
    from tiersim.groundtruth.settled_collectives import settle, storage_uses

    kept = torch.zeros(8)
    alone = storage_uses(kept)  # the caller's tensor (and the look's own storage object)
    work: list = []  # what the stand-in work holds
    events: list[str] = []
    released = threading.Event()

    def let_go() -> None:
        # both marks before the view is dropped: `settle` may return the moment it is
        events.append("let go")
        released.set()
        work.clear()

    def issue(view):
        work.append(view)

        def wait() -> None:
            events.append("waited")
            threading.Timer(0.05, let_go).start()  # the worker loops for its next work later

        return wait

    settle((kept,), issue, "a stand-in all-reduce")
    events.append("returned")
    assert events == ["waited", "let go", "returned"]
    assert released.is_set() and storage_uses(kept) == alone


def test_a_work_that_holds_no_view_is_an_error_not_a_silent_race():
    from tiersim.groundtruth.settled_collectives import UnsettledCollectiveError, settle

    with pytest.raises(UnsettledCollectiveError, match="holds no view of its tensor"):
        settle((torch.zeros(4),), lambda view: lambda: None, "a copying collective")


def test_a_worker_that_never_lets_go_raises_instead_of_hanging(monkeypatch):
    """Bounded by SETTLE_S (made short here); not a RuntimeError, which the FSDP2 ground truth
    records as a step PyTorch refuses rather than as a failure."""
    from tiersim.groundtruth import settled_collectives as sc

    monkeypatch.setattr(sc, "SETTLE_S", 0.01)
    kept, work = torch.zeros(4), []
    with pytest.raises(sc.UnsettledCollectiveError, match="still holds") as raised:
        sc.settle((kept,), lambda view: work.append(view) or (lambda: None), "a stuck all-gather")
    # the stand-in's view still counted: one use above the count before the collective
    held, before = map(int, re.search(r"use count (\d+), (\d+) before", str(raised.value)).groups())
    assert held == before + 1
    assert not isinstance(raised.value, RuntimeError)


def test_an_all_gather_returns_only_after_its_work_lets_go_of_input_and_output():
    """A work that lets go of its input first and of its output later (gloo's all-gather did,
    once in about 30 steps: its output then freed on the worker, unseen): `settle` watches
    both and returns only once neither is held."""
    from tiersim.groundtruth.settled_collectives import settle, storage_uses

    given, out = torch.zeros(4), torch.empty(8)
    alone = storage_uses(given), storage_uses(out)
    inputs: list = []
    outputs: list = []
    events: list[str] = []

    def let_go(held: list, what: str) -> None:
        events.append(what)
        held.clear()

    def issue(view_in, view_out):
        inputs.append(view_in)
        outputs.append(view_out)

        def wait() -> None:
            events.append("waited")
            let_go(inputs, "input let go")  # at once
            threading.Timer(0.05, let_go, (outputs, "output let go")).start()

        return wait

    settle((given, out), issue, "a stand-in all-gather")
    events.append("returned")
    assert events == ["waited", "input let go", "output let go", "returned"]
    assert (storage_uses(given), storage_uses(out)) == alone
