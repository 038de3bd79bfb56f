"""The text report: an empty tier-port table, the GPU tier's two peaks, the checkpoint line."""

from tiersim.report.text import port_table


def test_no_port_crossed_says_so_instead_of_an_empty_table():
    zero = {"bandwidth": 4.8e12, "bytes_per_step": 0, "full_rate_s": 0.0}
    report = {"tiers": {"hbm": {"ports": {"read": zero, "write": zero}}}, "step": {}}
    # it printed the header and its rule with no rows under them
    assert port_table(report) == "tier ports: no bytes cross one (nothing moves between tiers)"


def test_an_engine_peak_above_the_timeline_s_is_said_beside_it():
    # llama3-405b-128k-cp16: the tier table said 79.62 GB (the engine's occupancy), the
    # timeline 79.02 GB (context and NCCL included), with nothing linking the two figures
    from tiersim.report.memory import timeline_text

    mt = {
        "tier": "hbm",
        "capacity_bytes": 80e9,
        "peak_allocated_bytes": 77.69e9,
        "peak_reserved_bytes": 77.86e9,
        "outside_allocator_bytes": {"CUDA context": 0.76e9, "NCCL buffers": 0.40e9},
        "peak_total_bytes": 79.02e9,
        "peak_moment": "backward: layer 7",
        "peak_parts": {"saved activations": 77.69e9},
        "fits": True,
        "out_of_memory_at": None,
    }
    said = "the simulated step's occupancy peaks higher, at 79.62 GB"
    assert said in timeline_text(mt, engine_peak=79.62e9)
    assert said not in timeline_text(mt, engine_peak=78e9)  # below the timeline's: unsaid


def test_a_checkpoint_that_stalls_nothing_has_the_drain_s_optimum_said_so():
    # hbf-optimizer-state: an async checkpoint stalling 0 s makes Daly's optimum 0 s of work
    # between checkpoints; the line read "Daly's optimum, 0 s, is under the drain"
    from tiersim.report.checkpoint_text import checkpoint_lines

    ck = {
        "mode": "async",
        "target": "nvme",
        "interval_steps": 83,
        "interval_basis": "wear budget",
        "bytes": 123.49e9,
        "write_s": 18.732,
        "stall_s": 0.0,
        "recovery_s": 1326.0,
        "mtbf_s": 263.9 * 86400,
        "goodput": 0.9999,
        "optimal_interval_steps": {"daly": 2},
        "optimal_interval_s": {"daly": 0.0},
        "goodput_at_optimum": 1.0,
    }
    (line,) = checkpoint_lines(ck, step_s=16.75)
    assert "a checkpoint stalls nothing, so Daly's optimum is the drain's: every 2 steps" in line
    assert "0 s, is under the drain" not in line


def test_exposed_cpu_work_longer_than_the_cpu_optimizer_is_explained():
    # fsdp2-cpu-offload-llama2-7b: CPU optimizer 3.510 s, exposed CPU work 4.102 s, the
    # 0.59 s of host gradient adds unsaid
    from tiersim.report.text import cpu_note

    step = {"time_s": 17.464, "compute_s": 12.777, "recompute_s": 3.22, "optimizer_s": 3.51,
            "optimizer_on": "cpu", "exposed_transfer_s": 0.576, "exposed_cpu_s": 4.102}  # fmt: skip
    assert "exposed CPU work is longer than the CPU optimizer" in cpu_note(step)
    step["exposed_cpu_s"] = 3.0  # within the optimizer's time: nothing to explain
    assert cpu_note(step) == ""


def test_an_interval_of_one_step_under_the_drain_says_no_interval_is_shorter():
    # review 2026-12-07-j, "Found, not fixed": an `auto` interval of one step, Daly's optimum
    # 0 s under a drain of 0.365 s, the drain under the 7.28 s step, read "auto: the drain,
    # longer than Daly's optimum" and "Daly's optimum is the drain's: every 1 step"; the
    # interval is one step because none is shorter than a step, not because of the drain
    from tiersim.report.checkpoint_text import checkpoint_lines

    ck = {
        "mode": "async",
        "target": "nvme",
        "interval_steps": 1,
        "interval_basis": "shortest",
        "bytes": 482.36e6,
        "write_s": 0.01181,
        "span_s": 0.36494,
        "stall_s": 0.0,
        "recovery_s": 312.0,
        "mtbf_s": 24.74 * 3600,
        "goodput": 0.9966,
        "optimal_interval_steps": {"daly": 1},
        "optimal_interval_s": {"daly": 0.0},
        "goodput_at_optimum": 0.9966,
    }
    (line,) = checkpoint_lines(ck, step_s=7.2813)
    said = "every 1 step, auto: the shortest interval, Daly's optimum and the drain both under"
    assert said in line
    assert "Daly's optimum is the shortest interval: every 1 step" in line
    assert "the drain, longer than" not in line and "is the drain's" not in line
