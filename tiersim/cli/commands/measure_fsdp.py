"""`tiersim measure --fsdp N`: each FSDP2 rank's shard bytes beside tiersim's prediction."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tiersim.core.units import fmt_bytes

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.groundtruth.measure import Request

ROWS = (
    ("weights_local", "weights (local shard)"),
    ("weights_stored", "weights (padded storage)"),
    ("gradients", "gradients (reduce-scatter buffers)"),
    ("optimizer", "optimizer (exp_avg, exp_avg_sq)"),
    ("step_counters", "Adam step counters"),
)


def table(got: dict[str, Any]) -> str:
    from tiersim.report.table import render

    world = got["world_size"]
    rows = []
    for rank in got["ranks"]:
        for key, label in ROWS:
            meas, pred = rank["measured"][key], rank["predicted"][key]
            same = "equal" if meas == pred else f"{meas - pred:+,} B"
            rows.append([str(rank["rank"]), label, fmt_bytes(meas), fmt_bytes(pred), same])
    c = got["configuration"]
    title = (
        f"FSDP2 (fully_shard per layer and root) on {world} CPU ranks, gloo: "
        f"{c['dtype']}, AdamW, seq_len {c['seq_len']} tokens, micro-batch {c['micro_batch_size']}"
    )
    return render(["rank", "what", "measured", "predicted", "difference"], rows, title)


NOTES = (
    "each parameter is sharded on dim 0 in ceil(d0/N) rows per rank (trailing ranks may hold "
    "fewer, or none), stored padded to ceil(d0/N) rows on every rank; gradients are the padded "
    "buffers on every rank; tiersim's per-GPU figures under training.framework fsdp are rank 0's"
)


def step_table(got: dict[str, Any]) -> str:
    """Rank 0's step peak, measured and predicted, and the parts live at the predicted one."""
    from tiersim.report.table import render

    p, c = got["step_peak"], got["configuration"]
    meas, pred = p["measured_bytes"], p["predicted_bytes"]
    rows = [
        ["step peak (profiler)", fmt_bytes(meas), p["measured_phase"]],
        ["step peak (timeline)", fmt_bytes(pred), p["predicted_moment"]],
        ["difference", f"{pred - meas:+,} B ({pred / meas - 1:+.2%})", ""],
        *[[f"  {part}", fmt_bytes(n), ""] for part, n in p["predicted_parts"].items()],
    ]
    from tiersim.state.optimizers import REGISTRY

    stepped = REGISTRY.get(c["optimizer"])  # what the title calls it (Muon's: and AdamW's)
    optimizer = (stepped.fsdp2_title if stepped else "") or c["optimizer"]
    title = (
        f"FSDP2 (fully_shard per layer and root) on {got['world_size']} CPU ranks, gloo, rank 0: "
        f"transformers' model, {c['dtype']}, {optimizer}, seq_len {c['seq_len']} tokens"
        + (f", recompute {c['recompute']}" if "recompute" in c else "")
    )
    return render(["what", "bytes", "when"], rows, title)


STEP_NOTES = (
    "the timeline for the CPU counts gloo's own copies (its all-gather output, the clone its "
    "reduce-scatter all-reduces), which NCCL does not make: a GPU prediction leaves them out"
)


def run_fsdp(req: Request, world: int, fmt: str, said: Sequence[str] = ()) -> int:
    """`said`: notes on standard error once the request is found valid (before its first
    stage)."""
    from tiersim.cli.counting import Stages
    from tiersim.groundtruth.measure_hf import measure_fsdp
    from tiersim.report.json_report import to_json

    # as `measure` without --fsdp: each stage said by this process (the ranks are silent),
    # on a terminal in place, on a log as it starts and finishes
    stages = Stages("measure", log=True)
    notes = list(said)

    def told(stage: str) -> None:
        while notes:
            print(notes.pop(0), file=sys.stderr)
        stages(stage)

    try:
        got = measure_fsdp(req, world, told)
        stages.finish()
    finally:
        stages.close()
    if fmt == "json":
        print(to_json(got))
    elif "step_peak" in got:
        print(f"{step_table(got)}\n\nnotes:\n  - {STEP_NOTES}")
    else:
        print(f"{table(got)}\n\nnotes:\n  - {NOTES}")
    return 0
