"""The host memory timeline's words (`tiersim run` / `inventory`): the node's GPU count in the
singular where it is one, and the note on the simulated step's occupancy saying which way it
differs and why (report/host_memory.py). The figures are made up by hand: only the wording is
under test."""

from tiersim.report.host_memory import host_text


def _section(gpus: int, peak: int) -> dict:
    return {
        "tier": "dram",
        "capacity_bytes": 96_000_000_000,
        "peak_bytes": peak,
        "peak_moment": "optimizer step",
        "peak_parts": {"resident optimizer": peak},
        "fits": True,
        "out_of_memory_at": None,
        "node": {
            "gpus": gpus,
            "pipeline_stages": 1,
            "capacity_bytes": gpus * 96_000_000_000,
            "peak_bytes": gpus * peak,
        },
    }


def test_one_gpu_node_is_singular():
    text = host_text(_section(1, 16_000_000_000))
    assert "the node (1 GPU) " in text and "1 GPUs" not in text
    assert "the node (16 GPUs)" in host_text(_section(16, 16_000_000_000))


def test_engine_peak_higher_says_staging_not_temporaries():
    # engine 66.04 GB over a 65.50 GB timeline (zero-infinity-1t-dgx2's figures)
    text = host_text(_section(16, 65_500_000_000), engine_peak=66_040_000_000)
    assert "peaks higher, at 66.04 GB" in text
    assert "staging chunks" in text and "temporaries" not in text


def test_engine_peak_lower_says_temporaries_not_staging():
    # engine 15.60 GB under a 15.73 GB timeline (fsdp2-cpu-offload-llama2-7b's figures)
    text = host_text(_section(8, 15_730_000_000), engine_peak=15_600_000_000)
    assert "peaks lower, at 15.60 GB" in text
    assert "temporaries" in text and "staging chunks" not in text


def test_no_note_where_the_peaks_agree():
    assert "simulated step" not in host_text(_section(8, 1_000), engine_peak=1_000)


def test_inventory_note_does_not_defer_what_its_timelines_count(cli):
    """default.yaml's inventory lists the checkpoint's staged copy in its host timeline: its
    closing note must not say `run` is what adds staging and offloaded activations."""
    from conftest import SCENARIOS

    code, out, _ = cli("inventory", SCENARIOS / "default.yaml")
    assert code == 0
    assert "checkpoint staging copy (until durable)  11.79 GB" in out
    assert "(staging, offloaded activations, checkpoint versions)" not in out
    assert "step timelines, each with its verdict" in out
