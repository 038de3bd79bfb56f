"""The text report: the tier-port table where no port moves a byte, and the GPU tier's two peaks."""

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
