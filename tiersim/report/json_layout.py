"""The report JSON's key order: the step, link and tier sections' figures as earlier versions
laid them out (a new figure the figure map declares is appended after them), and the step's
headline figures a comparison and a sweep show first."""

from __future__ import annotations

# The step's scalar figures, as dotted paths in the report: what a comparison and a sweep's
# results table both show first, after `fits`
STEP_FIGURES = (
    "step.time_s",
    "step.tokens_per_s",
    "step.mfu",
    "step.compute_s",
    "step.recompute_s",
    "step.optimizer_s",
    "step.exposed_transfer_s",
    "step.exposed_collective_s",
    "step.exposed_cpu_s",
    "step.pipeline_bubble_s",
)

# The order of the step's, a link's and a tier's keys in the report; a figure the map reports
# (engine.results, `json=`) that these do not place comes after them (figures.laid_out)
STEP_LAYOUT = (
    "optimizer_on",
    "optimizer_step",
    "time_s",
    "compute_s",
    "recompute_s",
    "optimizer_s",
    "exposed_transfer_s",  # waits on movement between tiers
    "exposed_collective_s",  # waits on collectives
    "exposed_cpu_s",
    "pipeline_bubble_s",
    "overlap",
    "tokens_per_s",
    "tokens_per_step",
    "model_flops_per_token",
    "model_flops_per_s_per_gpu",
    "mfu",
    "micro_batches",
    "seq_len",
    "seq_len_from",
    "breakdown",
)
LINK_LAYOUT = (
    "bytes",
    "busy_s",
    "utilization",
    # with latency: begun and not landed (the step picture's "in flight"), >= busy_s
    "in_flight_s",
    "in_flight_utilization",
    "bandwidth_per_direction",
    "bytes_by_direction",
    "bandwidth_utilization_by_direction",
)
TIER_LAYOUT = (
    "capacity_bytes",
    "resident_bytes",
    "checkpoint_bytes",
    "peak_bytes",
    "mean_bytes",
    "fits",
    "bytes_read_per_step",
    "bytes_written_per_step",
    "read_by_class",
    "written_by_class",
    "classes",
    "ports",
)
