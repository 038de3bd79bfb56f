"""torch.profiler without its native noise: Kineto writes lines such as `USDT:... profiler_start`
and `STAGE:... Completed Stage: Warm Up` straight to the process's file descriptors when a
profile starts and stops, past Python's sys.stdout / sys.stderr, into the user's terminal
between `tiersim measure`'s figures. Here file descriptors 1 and 2 are sent to a temporary
file while the profiler runs; what it held is written back to stderr afterwards, the
profiler's own lines left out.

`memory_profile` records only what a step's memory is read from (groundtruth/step_peaks.py):
the allocations and frees, and the `record_function` ranges that name the phases."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

# Kineto's start / stop / stage lines (libkineto's SyncActivityProfilerHandler and
# ActivityProfilerController logging): nothing the user can act on
PROFILER_NOISE = re.compile(r"^(USDT|STAGE):.*\] (profiler_(start|stop)|Completed Stage)")


def _flush_c_streams() -> None:
    """C's stdio buffers (a library's printf), flushed before the descriptors move back."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_output_filtered() -> Iterator[None]:
    """Descriptors 1 and 2 captured while the body runs; their lines but the profiler's are
    written to stderr afterwards (and all of them where the body raises)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile(mode="w+b") as held:
        for fd in saved:
            os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            _flush_c_streams()
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            held.seek(0)
            text = held.read().decode(errors="replace")
            kept = [ln for ln in text.splitlines(keepends=True) if not PROFILER_NOISE.match(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


@contextlib.contextmanager
def quiet_profile(**options: Any) -> Iterator[Any]:
    """`torch.profiler.profile(**options)`, its start and stop lines kept out of the output."""
    from torch.profiler import profile

    with native_output_filtered(), profile(**options) as prof:
        yield prof


@contextlib.contextmanager
def memory_profile() -> Iterator[Any]:
    """`quiet_profile(activities=[CPU], profile_memory=True)` observing only the user's
    `record_function` ranges (RecordScope.USER_SCOPE), not every operator: the same memory
    events (an allocation is reported to the profiler's thread state whatever it observes:
    c10's reportMemoryUsageToProfiler), without an event an operator for Kineto to build and
    hand back at the stop. What it yields has, once the block has ended,
    `profiler.kineto_results` as torch.profiler.profile's (measured_peaks reads either).
    Every cell of tests/test_fsdp2_step.py's matrix measured the same StepPeaks, field for
    field, either way (docs/suite-time.md)."""
    from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
    from torch._C._profiler import (
        ProfilerActivity,
        ProfilerConfig,
        ProfilerState,
        RecordScope,
        _ExperimentalConfig,
    )
    from torch.autograd.profiler import _run_on_profiler_start, _run_on_profiler_stop

    # (state, shapes, memory, stack, flops, modules, experimental): as profile_memory=True
    config = ProfilerConfig(
        ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig()
    )
    activities = {ProfilerActivity.CPU}
    held = SimpleNamespace(profiler=SimpleNamespace(kineto_results=None))
    with native_output_filtered():
        _prepare_profiler(config, activities)
        _run_on_profiler_start()
        _enable_profiler(config, activities, {RecordScope.USER_SCOPE})
        try:
            yield held
        finally:
            held.profiler.kineto_results = _disable_profiler()
            _run_on_profiler_stop()
