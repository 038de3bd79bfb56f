"""The report for people: the inventory and run tables, and the sentences under them.

Reads only the JSON-ready report (tiersim.report.json_report) and the scenario, never the engine.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes, fmt_rate, fmt_time, fmt_tokens_per_s
from tiersim.engine.results import MAX_STEADY_STEPS
from tiersim.report.checkpoint_text import checkpoint_lines, fmt_goodput
from tiersim.report.host_memory import SECTION as HOST
from tiersim.report.host_memory import host_text, host_warning
from tiersim.report.inventory_text import inventory_tables as inventory_tables  # re-exported
from tiersim.report.memory import timeline_text, timeline_warning
from tiersim.report.network_text import PRICED_NOTE, network_notes, priced_outside_flows
from tiersim.report.offload_text import offload_line, tiling_line
from tiersim.report.sim_text import UNSETTLED, simulated_line
from tiersim.report.table import render
from tiersim.report.target import target_line

# --- the simulated step ------------------------------------------------------------------------


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"


def _step_rows(st: dict[str, Any]) -> list[list[str]]:
    """The step split into what the GPU did and what it waited on (the shares add up to 100 %);
    a CPU optimizer's time is shown beside them, its exposed part among them."""
    t = st["time_s"]
    on_cpu = st.get("optimizer_on") == "cpu"
    rows = [["step time", fmt_time(t), "100.0 %"]]
    for key, label in (
        ("compute_s", "GPU compute (fwd+bwd+recompute)"),
        ("recompute_s", "  of which recompute"),
        ("optimizer_s", "CPU optimizer (beside the GPU)" if on_cpu else "GPU optimizer"),
        ("pipeline_bubble_s", "pipeline bubble (other stages)"),
        ("exposed_transfer_s", "exposed transfer (GPU waits)"),
        ("exposed_collective_s", "exposed collectives (GPU waits)"),
        ("exposed_cpu_s", "exposed CPU work (GPU waits)"),
    ):
        value = st.get(key, 0.0)  # a report before exposed_collective_s: none apart
        if key in ("pipeline_bubble_s", "exposed_collective_s") and not value:
            continue
        share = "-" if key == "optimizer_s" and on_cpu else _pct(value, t)
        rows.append([label, fmt_time(value), share])
    return rows


BREAKDOWN_LABELS = (
    ("gemm_s", "GEMM"),
    ("memory_bound_s", "memory-bound kernels"),
    # `parallel.pipeline_engine_overhead`: a user's calibration of their own run (MT-NLG's
    # 0.283 a fit), not a property of any framework; the JSON key keeps its name
    ("framework_s", "calibrated overhead (pipeline_engine_overhead)"),
    ("collectives_s", "blocking collectives"),
    ("bubble_s", "pipeline fill and drain"),
    ("imbalance_s", "stage imbalance"),
)


def _breakdown_table(st: dict[str, Any], framework: str | None = None) -> list[str]:
    """The model's prices of the step's parts (`step.breakdown`), beside the measured split."""
    parts, t = st.get("breakdown"), st["time_s"]
    if not parts:
        return []
    rows = [
        [label, fmt_time(parts[key]), _pct(parts[key], t)]
        for key, label in BREAKDOWN_LABELS
        if parts[key] or key not in ("framework_s", "bubble_s", "imbalance_s")
    ]
    # what no price covers: waits on links (an overlapped reduction's exposed tail, offload
    # transfers, contention); the GPU optimizer's step is its own row, and so is the exposed
    # CPU work, as the step's table names it (a CPU update priced by workload/cpu_optimizer.py,
    # FSDP2's host gradient adds: review (k) found it counted as 'not priced', 93.8 % of a
    # small ZeRO-3 step)
    on_gpu = st["optimizer_on"] == "gpu"
    optimizer = st["optimizer_s"] if on_gpu else st.get("exposed_cpu_s", 0.0)
    if optimizer:
        label = "GPU optimizer" if on_gpu else "exposed CPU work (CPU optimizer, host work)"
        rows.append([label, fmt_time(optimizer), _pct(optimizer, t)])
    rest = t - sum(parts[key] for key, _ in BREAKDOWN_LABELS) - optimizer
    if rest > 1e-9 * t:
        # DeepSpeed's gradient-path kernels (bucket copies, division, norm) run in the step
        # but are priced in no part of it
        label = "waits, gradient-path kernels" if framework == "deepspeed" else "exposed waits"
        rows.append([f"{label} (not priced)", fmt_time(rest), _pct(rest, t)])
    return [render(["model's prices", "time", "of step"], rows)]


def _step_head(report: dict[str, Any], mfu_peak: str | None = None) -> str:
    st = report["step"]
    overlap = (  # None: no link was busy in the step, so there is no share to give
        _no_overlap(report)
        if st["overlap"] is None
        else f"transfer overlapped with compute {100 * st['overlap']:.1f} %"
    )
    tokens = f"{fmt_tokens_per_s(st['tokens_per_s'])} over all the job's GPUs"
    ck = report.get("checkpoint") or {}
    if ck.get("mtbf_s") is not None and ck.get("goodput") is not None:  # beside what it scales
        goodput = st["tokens_per_s"] * ck["goodput"]
        # the share too: at 99.99 % the two rates print alike, and the reader wonders why
        tokens += (
            f" ({fmt_tokens_per_s(goodput)} after checkpoints and failures: goodput "
            f"{fmt_goodput(ck['goodput'])})"
        )
    if st.get("mfu") is not None:  # PaLM's MFU: the model's FLOPs, not recompute's
        tokens += (
            f", {st['model_flops_per_s_per_gpu'] / 1e12:,.1f} model TFLOP/s per GPU "
            f"(MFU {100 * st['mfu']:.1f} %{' ' + mfu_peak if mfu_peak else ''})"
        )
    head = f"{report['scenario']}: {fmt_time(st['time_s'])} per step, {tokens}, {overlap}"
    return "\n".join([head, *_head_warnings(report)])


def _no_overlap(report: dict[str, Any]) -> str:
    """Why there is no overlap share: nothing crossed a link, or only a checkpoint's copies
    did (their links' busy time is its, beside the step's compute)."""
    if any(link["bytes"] for link in report["links"].values()):
        return "no link carried a transfer in the step itself (only the checkpoint's copies)"
    return "no link carried a transfer"


def fit_warning(report: dict[str, Any]) -> str:
    """'DOES NOT FIT: ...' naming each tier the run overfills, or '' where all fit."""
    over = [(n, t) for n, t in report["tiers"].items() if not t["fits"]]
    if not over:
        return ""
    timeline = timeline_warning(report)
    if timeline and all(n == report["memory_timeline"]["tier"] for n, _ in over):
        return f"DOES NOT FIT: {timeline} (the step is timed as if it did)"
    host = host_warning(report)
    if host and all(n == report[HOST]["tier"] for n, _ in over):
        return f"DOES NOT FIT: {host} (the step is timed as if it did)"
    held = ", ".join(
        f"{n} {fmt_bytes(max(t['peak_bytes'], t['resident_bytes']))} of "
        f"{fmt_bytes(t['capacity_bytes'])}"
        for n, t in over
    )
    return f"DOES NOT FIT: {held} (the step is timed as if it did)"


def _head_warnings(report: dict[str, Any]) -> list[str]:
    """What would make the headline's figures mislead if it went unsaid."""
    fits = fit_warning(report)
    out = [fits] if fits else []
    st = report["step"]
    if st["optimizer_step"] == "pipelined":
        # the mode's intent: how much it hid needs the synchronous run (review 2026-12-07-d #6)
        out.append(
            "optimizer step pipelined: each unit's update may overlap the next step's forward; "
            f"what it leaves unhidden is within the exposed transfer "
            f"({fmt_time(st['exposed_transfer_s'])}), and a run with --set "
            "training.optimizer_step=synchronous shows how much it hid (training.optimizer_step)"
        )
    if st["optimizer_step"] == "delayed":  # DPU hides the update only on the CPU
        gpu = ", but the update is on the GPU, whose stream waits for it as if synchronous"
        on = " while the CPU updates" if st.get("optimizer_on") == "cpu" else gpu
        out.append(
            "optimizer step delayed (DPU): each step runs on the weights of the step before "
            f"last{on} (training.optimizer_step)"
        )
    if (report.get("offload") or {}).get("tiling"):
        out.append(tiling_line(report["offload"]))
    source = {"model.max_positions": "the model's max_positions", "default": "tiersim's default"}
    if st["seq_len_from"] in source:
        out.append(
            f"sequences of {st['seq_len']:,} tokens: {source[st['seq_len_from']]}, as "
            "training.seq_len is not set"
        )
    if (report.get("checkpoint") or {}).get("steady") is False:
        out.append(
            "checkpoint: with every step checkpointing, the step was not seen to repeat "
            f"within {MAX_STEADY_STEPS} steps (or simulation.max_layer_passes); the last one "
            "simulated is reported"
        )
    if report.get("sim", {}).get("settled") is False:  # engine.settling: the runs' bound
        out.append(
            "step not settled: the steps after the measured one were not seen to settle "
            "within the runs' bound or simulation.max_layer_passes, so the step reported is "
            f"not known to be the steady state's (sim.measured_steps_why) [{UNSETTLED}]"
        )
    if report.get("sim", {}).get("steady_state") == "full (no repetition found)":
        out.append(
            f"steady state: the step was not seen to repeat micro-batch to micro-batch, so all "
            f"{st['micro_batches']:,} micro-batches were simulated (simulation.steady_state)"
            + (f": {why}" if (why := report["sim"].get("steady_state_why")) else "")
        )
    return out


IN_FLIGHT_NOTE = (
    "busy: bytes moving (utilization: its share of the step); in flight: a transfer begun "
    "and not landed, its latency included (as `run --plot` says of a link's rows, there per "
    "direction or group); bandwidth used: the busier direction's bytes / (bandwidth/dir x step "
    "time)"
)


def step_tables(
    report: dict[str, Any], engine_s: float | None = None, mfu_peak: str | None = None
) -> str:
    """`tiersim run`'s table output: the step, links, tiers, then the sentences. `engine_s`,
    the engine's wall-clock time, is a measurement of this machine: said when given, never
    part of the report. `mfu_peak`: which peak MFU is against, where that matters
    (utilization.mfu_peak_note)."""
    head = _step_head(report, mfu_peak)
    step = render(["", "time", "share"], _step_rows(report["step"]), head)
    step += cpu_note(report["step"])
    tables = [
        step,
        *_breakdown_table(report["step"], (report.get("offload") or {}).get("framework")),
        _link_table(report),
        _tier_table(report),
        *([_timeline(report)] if "memory_timeline" in report else []),
        *([_host(report)] if HOST in report else []),
        port_table(report),
    ]
    return "\n\n".join([*tables, *_sentences(report, engine_s)])


def cpu_note(st: dict[str, Any]) -> str:
    """Where the GPU waits on the CPU longer than its optimizer runs: the rest is the host's
    other work (FSDP2's adds of offloaded gradients, DeepSpeed's copies)."""
    longer = st.get("exposed_cpu_s", 0.0) - st["optimizer_s"]
    # a sum's rounding (3.6e-15 s over 16.68 s on mixtral-8x7b-ep-dgx-h100) is no other work
    if st.get("optimizer_on") != "cpu" or longer <= 1e-9 * max(st["optimizer_s"], 1.0):
        return ""
    return (
        f"\nexposed CPU work is longer than the CPU optimizer (by {fmt_time(longer)}): it also "
        "counts the host's other work the GPU waits on (gradient adds into offloaded buffers, "
        "copies)"
    )


def _link_table(report: dict[str, Any]) -> str:
    """Each link's bytes, busy time (bytes moving) and time with a transfer in flight (its
    latency too: what the step picture's rows say), and the share of its bandwidth used."""
    links = sorted(report["links"].items(), key=lambda kv: -kv[1]["busy_s"])
    rows = [
        [
            n,
            _bandwidth(v["bandwidth_per_direction"]),
            fmt_bytes(v["bytes"]),
            fmt_time(v["busy_s"]),
            f"{100 * v['utilization']:.1f} %",
            fmt_time(v["in_flight_s"]),
            f"{100 * v['in_flight_utilization']:.1f} %",
            _share(max(v["bandwidth_utilization_by_direction"].values(), key=_or_zero, default=0)),
        ]
        for n, v in links
    ]
    header = [
        "link",
        "bandwidth/dir",
        "bytes/step",
        "busy",
        "utilization",
        "in flight",
        "in flight %",
        "bandwidth used",
    ]
    table = render(header, rows) + "\n" + IN_FLIGHT_NOTE
    if priced_outside_flows(report["links"]):
        table += "\n" + PRICED_NOTE
    return table + network_notes(report["links"].get("network"), report["step"]["time_s"])


def _tier_table(report: dict[str, Any]) -> str:
    rows = [
        [
            n,
            fmt_bytes(v["resident_bytes"]),
            fmt_bytes(v["peak_bytes"]),
            fmt_bytes(v["capacity_bytes"]),
            fmt_bytes(v["bytes_read_per_step"]),
            fmt_bytes(v["bytes_written_per_step"]),
            "yes" if v["fits"] else "NO",
        ]
        for n, v in report["tiers"].items()
    ]
    header = ["tier", "resident", "peak", "capacity", "read/step", "written/step", "fits"]
    return render(header, rows) + _checkpoint_in_tiers(report)


def _checkpoint_in_tiers(report: dict[str, Any]) -> str:
    """Where the tier table's resident holds a checkpoint: inventory's resident, the training
    state alone, says 0 B of the same tier (default.yaml's nvme: 11.79 GB here), and its
    written/step is a checkpoint spread over its interval (11.79 MB, not 11.79 GB)."""
    ck = report.get("checkpoint") or {}
    held = [
        (n, v["checkpoint_bytes"]) for n, v in report["tiers"].items() if v.get("checkpoint_bytes")
    ]
    if not held or not ck.get("interval_steps"):
        return ""
    where = ", ".join(f"{n} {fmt_bytes(b)}" for n, b in held)
    return (
        f"\nresident includes the durable checkpoint ({where}; `tiersim inventory` counts the "
        f"training state alone); read/step and written/step spread each checkpoint over its "
        f"{ck['interval_steps']:,}-step interval"
    )


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _or_zero(x: float | None) -> float:
    return 0.0 if x is None else x


def _timeline(report: dict[str, Any]) -> str:
    mt = report["memory_timeline"]
    return timeline_text(mt, report["tiers"][mt["tier"]].get("engine_peak_bytes"))


def _host(report: dict[str, Any]) -> str:
    hm = report[HOST]
    return host_text(hm, report["tiers"][hm["tier"]].get("engine_peak_bytes"))


def port_table(report: dict[str, Any]) -> str:
    """Every tier port something crossed: a port slower than its link is what binds (HBF's
    write port), which the link's busy time alone does not show."""
    rows = [
        [
            f"{n} {port}",
            _bandwidth(p["bandwidth"]),
            fmt_bytes(p["bytes_per_step"]),
            fmt_time(p["full_rate_s"]),
            _share(p["bandwidth_utilization"]),
        ]
        for n, v in report["tiers"].items()
        for port, p in v["ports"].items()
        if p["bytes_per_step"]
    ]
    header = ["tier port", "bandwidth", "bytes/step", "at full rate", "bandwidth used"]
    table = (
        render(header, rows)
        if rows
        else "tier ports: no bytes cross one (nothing moves between tiers)"
    )
    st = report["step"]
    neck = st.get("bottleneck")
    if neck:
        # the busiest need not be what the step waits on (an async checkpoint's drain runs
        # beside it): the share the GPU waits on transfers says how much bandwidth bounds it
        waits = st["exposed_transfer_s"] / st["time_s"] if st["time_s"] > 0 else 0.0
        table += (
            f"\nbusiest (step.bottleneck): the {neck['resource']}, "
            f"{_share(neck['bandwidth_utilization'])} of its bandwidth over the step (bandwidth "
            "used = bytes / (bandwidth x step time); a link's utilization is the time it is "
            f"busy); the GPU waits on transfers for {_share(waits)} of the step (exposed "
            "transfer, in the step's table): bandwidth bounds no more of it than that"
        )
    return table


def _sentences(report: dict[str, Any], engine_s: float | None) -> list[str]:
    """Wear verdicts (as `tiersim wear` orders them: budgets failed, then met, then tiers
    without a budget), what was simulated, and the checkpoint."""
    wear = sorted(
        report.get("wear", {}).values(),
        key=lambda v: (v["within_budget"] is None, v["within_budget"] is True),
    )
    lines = [v["verdict"] for v in wear]
    if report.get("offload"):
        cpu_update = report["step"]["optimizer_on"] == "cpu"
        sim = report["sim"]
        depth, configured = sim["prefetch_depth"], sim.get("prefetch_depth_configured")
        lines.append(offload_line(report["offload"], cpu_update, depth, configured))
    lines.append(simulated_line(report, engine_s))
    if report.get("target"):  # training.tokens_per_day or total_tokens given
        lines.append(target_line(report["target"]))
    if report.get("checkpoint"):
        lines += checkpoint_lines(report["checkpoint"], report["step"]["time_s"])
    else:
        lines.append(
            "No checkpoint modelled (checkpoint.every_steps unset): no checkpoint writes, "
            "stalls, recovery or goodput in these figures."
        )
    return lines


def _bandwidth(bw: float | None) -> str:
    return "unlimited" if bw is None else fmt_rate(bw)
