"""`tiersim calibrate`'s options that the host's CPUs and memory bound, checked before
anything is measured (exit 2)."""

from __future__ import annotations

import argparse
import os

from tiersim.core.errors import Problem
from tiersim.core.units import fmt_bytes


def cpu_problems(args: argparse.Namespace, available: int | None = None) -> list[Problem]:
    """Threads past this host's CPUs measure contention, not the host, and past a few
    thousand end the process (libgomp cannot make them; 100,000 segfaulted); the CPU AdamW
    holds four fp32 arrays of --optimizer-params (weights, gradients, two moments): refused
    before any is allocated where memory lacks them (1e11 ended in a traceback)."""
    from tiersim.groundtruth.calibrate import available_memory

    problems = []
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.threads and cpus and args.threads > cpus:
        why = f"{args.threads:,} threads on {cpus} CPUs (expected at most {cpus}, this host's)"
        problems.append(Problem("--threads", why, "E-OPTION"))
    available = available_memory() if available is None else available
    need = 16 * args.optimizer_params  # 4 fp32 arrays: weights, gradients, exp_avg, exp_avg_sq
    if available is not None and need > available:
        why = (
            f"the CPU AdamW holds four fp32 arrays of {args.optimizer_params:,} parameters, "
            f"{fmt_bytes(need)}: {fmt_bytes(available)} is available (expected fewer parameters)"
        )
        problems.append(Problem("--optimizer-params", why, "E-OPTION"))
    return problems
