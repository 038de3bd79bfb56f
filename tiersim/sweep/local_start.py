"""How the local pool's workers start: from a fork server that has imported the points' code
once (else spawned), its helpers started with Ctrl-C and SIGTERM blocked (see
`tiersim.sweep.execute.LocalPool`)."""

from __future__ import annotations

import multiprocessing

from tiersim.sweep.signals import blocked

WORKER_MODULE = "tiersim.sweep.keep"  # what points run (run_and_keep, run_point): imported first


def local_context() -> multiprocessing.context.BaseContext:
    """The local pool's way of starting workers: from a fork server (else spawned), its
    helpers started (`_start_helpers`), with the points' code to preload. Called early (as
    `tiersim plan` starts), the server's imports run while the caller works, and the pool
    opened later finds it running."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if context.get_start_method() == "forkserver":  # a server already running keeps its own
        context.set_forkserver_preload(["__main__", WORKER_MODULE])  # __main__: the default
    _start_helpers(context)
    return context


def _start_helpers(context: multiprocessing.context.BaseContext) -> None:
    """Start CPython's resource tracker and, for `context` "forkserver", the fork server (each
    unless running), Ctrl-C and SIGTERM blocked in them (see `LocalPool`). The tracker first:
    it blocks them itself while it starts, then unblocks them in the thread that started it."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        with blocked():
            forkserver.ensure_running()  # returns at once: the server's imports run in it
