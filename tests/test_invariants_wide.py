"""The invariants of docs/invariants.md (h) to (l) and (a), (b) at the scale's extremes and
over the keys benchmarks/explore_wide.py widened the draw to: the cheap, derandomized version
of that exploration (five scenarios, each a few runs of a 4-layer model of width 256 on the
h200-hbf preset), and tests of its checks on figures worked out by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from invariant_checks import MODEL, check_report, interval_slower, merge
from wide_checks import (
    checkpoint_slows,
    knobs,
    parts_add_up,
    peaks_hold,
    still_fits,
    unlimited,
    wear_adds_up,
)

from tiersim import api
from tiersim.analysis.checkpoint_interval import per_step

ROOT = Path(__file__).resolve().parent.parent
ORDERED = {"simulation": {"link_sharing": "ordered"}}
MOE = {"experts": 4, "experts_per_token": 2}

# each: (what it covers, the scenario's keys over the 4-layer model, the knob raised)
CASES = {
    "zero-infinity": (
        {
            "training": {
                "framework": "deepspeed",
                "optimizer": "adamw",
                "offload": {"sub_group_size": 100_000, "max_live_parameters": 100_000},
            },
            "parallel": {"data": 2, "zero_stage": 3},
            "placement": {
                "weights": "nvme",
                "gradients": "dram",
                "master": "nvme",
                "optimizer": "nvme",
                "optimizer_compute": "cpu",
            },
            "checkpoint": {"every_steps": 2, "target": "nvme", "mode": "blocking"},
        },
        "nvme link",
    ),
    "fsdp2-hbf-homes": (
        {
            "training": {"framework": "fsdp", "optimizer": "muon", "grad_accumulation": 2},
            "parallel": {"data": 4, "zero_stage": 3, "reshard_after_forward": False},
            "placement": {"weights": "hbf", "master": "hbf", "optimizer": "hbf"},
            "simulation": {"prefetch_depth": 4},
            "checkpoint": {"every_steps": 2, "target": "nvme", "mode": "async"},
        },
        "hbf link",
    ),
    "moe-ep-imbalance-fp8": (
        {
            "model": MOE,
            "training": {
                "implementation": "huggingface",
                "optimizer": "adamw8bit",
                "fp8": {"recipe": "rowwise"},
            },
            "parallel": {"data": 8, "expert": 4, "expert_imbalance": 1.5},
            "placement": {"optimizer": "hbf"},
            "checkpoint": {"every_steps": 2, "target": "hbf", "mode": "blocking"},
        },
        "nvlink",
    ),
    "16384-gpus-context-pipelined": (
        {
            "training": {
                "optimizer_step": "pipelined",
                "recompute": "full",
                "recompute_every": 2,
                "grad_accumulation": 2,
            },
            "parallel": {"data": 4096, "tensor": 2, "context": 2, "context_comm": "ring"},
            "placement": {"master": "dram", "optimizer": "dram"},
        },
        "network",
    ),
    "1024-micro-batches-interleaved": (
        {
            "training": {
                "implementation": "megatron",
                "grad_accumulation": 1024,
                "recompute": "selective",
                "recompute_modules": ["core_attn", "mlp"],
            },
            "parallel": {"pipeline": 2, "virtual_pipeline": 2},
        },
        "gpu",
    ),
}


def scenario(keys: dict) -> dict:
    base = {
        "name": "wide",
        "model": MODEL,
        "training": {"seq_len": 512},
        "parallel": {},
        "hardware": {"preset": "h200-hbf"},
    }
    return merge(base, keys)


def lifecycle(raw: dict):
    return api.run(api.build(raw)).lifecycle


def report(raw: dict) -> dict:
    return api.run(api.build(raw)).report


@pytest.mark.parametrize("name", list(CASES))
def test_the_widened_keys_keep_every_invariant(name):
    keys, knob = CASES[name]
    raw = scenario(keys)
    run = lifecycle(raw)
    base = run.report
    assert check_report(base) + parts_add_up(base) + peaks_hold(base) + wear_adds_up(base) == []
    gpu = base["memory_timeline"]["tier"]
    cap = base["tiers"][gpu]["capacity_bytes"]
    more = merge(raw, {"hardware": {"tiers": {gpu: {"capacity": f"{int(cap * 1.5)} B"}}}})
    assert still_fits(base, report(more)) == []
    ordered = merge(raw, ORDERED)
    slow = report(ordered)
    fast = report(merge(ordered, {"hardware": knobs(run.resolved.machine, math.inf)[knob]}))
    assert fast["step"]["time_s"] <= slow["step"]["time_s"] * (1 + 1e-9)
    assert interval_slower(slow, fast) == []
    if "checkpoint" in raw:
        plain = {k: v for k, v in ordered.items() if k != "checkpoint"}
        assert checkpoint_slows(report(plain), slow) == []
    free = report(merge(raw, {"hardware": unlimited(run.resolved.machine)}))["step"]
    assert free["exposed_transfer_s"] == 0 and free["exposed_collective_s"] == 0


def test_wear_is_the_bytes_the_step_writes_to_flash():
    # Llama 2 7B, 6,738,415,616 parameters (scenarios/default.yaml), its fp32 master (4 B)
    # and Adam moments (8 B) homed on HBF, read and written back once a step:
    # 6,738,415,616 x 12 = 80,860,987,392 B written to HBF a step; with HBF's 4 TB (the
    # h200-hbf preset) and no spare area nor amplification, 80,860,987,392 / 4e12 =
    # 0.020215246848 P/E cycles a step
    r = api.run(api.load(ROOT / "scenarios" / "default.yaml")).report
    w = r["wear"]["hbf"]
    assert w["host_bytes_written_per_step"] == 80_860_987_392
    assert w["pe_cycles_per_step"] == pytest.approx(0.020215246848, rel=1e-12)
    assert wear_adds_up(r) == []


def test_an_interval_chosen_for_the_machine_may_lengthen_on_a_faster_one():
    # every_steps: auto picks the interval for the step (Daly's optimum, a wear budget): a
    # faster step (10 -> 8 s) given 100 -> 130 steps has a longer interval (1,000 -> 1,040 s)
    # and is no violation; the wall time per useful step (10 / 0.99 -> 8 / 0.99) is checked
    def run(step_s, steps, basis):
        ck = {"interval_steps": steps, "stall_s": 0.0, "goodput": 0.99, "interval_basis": basis}
        return {"step": {"time_s": step_s}, "checkpoint": ck}

    assert interval_slower(run(10.0, 100, "auto"), run(8.0, 130, "auto")) == []
    given = interval_slower(run(10.0, 100, "given"), run(8.0, 130, "given"))
    assert given == ["checkpoint interval 1000 s -> 1040 s"]


# --- one test per violation benchmarks/explore_wide.py found (each failed before) ---------

# every class in DRAM, the CPU updating it a step late: a 27 ms update beside micro-batches
# of 0.19 ms of GPU work (full recompute), so the step is the update's up to ~140 of them
DELAYED_CPU = {
    "training": {"recompute": "full", "optimizer_step": "delayed"},
    "placement": {
        "gradients": "dram",
        "master": "dram",
        "optimizer": "dram",
        "optimizer_compute": "cpu",
    },
}


def both(raw: dict) -> tuple[dict, dict]:
    """The report as simulated by default, and with every micro-batch simulated."""
    return report(raw), report(merge(raw, {"simulation": {"steady_state": "full"}}))


def test_an_update_running_past_the_samples_is_not_extrapolated_from_them():
    # One run of 5 micro-batches: its periods repeat beside the previous step's update, which
    # ends the step; extrapolated by a period each, 64 micro-batches came to 44.18 ms where
    # simulated in full they take 27.02 ms (the update's)
    fast, full = both(scenario(merge(DELAYED_CPU, {"training": {"grad_accumulation": 64}})))
    assert fast["step"]["time_s"] == pytest.approx(full["step"]["time_s"], rel=1e-9)


def test_a_checkpointed_step_past_its_update_grows_with_its_micro_batches():
    # With a blocking checkpoint every 2 steps, three runs (3, 4, 5) grew by 0 (the update's
    # step): 150 micro-batches came to 27.02 ms, below their own GPU work (compute_s,
    # 28.56 ms), the CPU's exposed time -1.58 ms (exit 70); in full: 43.62 ms
    ck = {"checkpoint": {"every_steps": 2, "target": "nvme", "mode": "blocking"}}
    raw = scenario(merge(DELAYED_CPU, {"training": {"grad_accumulation": 150}, **ck}))
    fast, full = both(raw)
    assert fast["step"]["time_s"] >= fast["step"]["compute_s"]
    assert fast["step"]["time_s"] == pytest.approx(full["step"]["time_s"], rel=1e-9)


def test_a_checkpoints_bytes_a_step_balance_between_reads_and_writes():
    # A checkpoint of 6,959 B a GPU every 10 steps (seed 26 case 191: 16,384 GPUs), staged in
    # DRAM: its copies write 5,423 + 6,959 + 453 = 12,835 B into DRAM, NVMe and HBM and read
    # 2,351 + 6,959 + 453 + 3,072 = 12,835 B out of HBM, DRAM, HBF and NVMe. A step's share is
    # 12,835 / 10 = 1,283.5 B, rounded to even: 1,284 B both ways. The fractions summed in
    # floats came to 1,283.4999... for the writes (1,283 B) and 1,283.5 for the reads (1,284).
    writes = per_step({"dram": 5423, "nvme": 6959, "hbm": 453}, 10)
    reads = per_step({"hbm": 2351, "dram": 6959, "hbf": 453, "nvme": 3072}, 10)
    assert sum(writes.values()) == sum(reads.values()) == 1284
