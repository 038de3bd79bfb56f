"""Adversarial exploration of the timing model's invariants over the newer scenario keys.

    nice .venv/bin/python benchmarks/explore_invariants.py [--cases 200] [--seed 1] [--budget 600]

Draws random small scenarios (a 4-layer transformer of width 256, dense or MoE) that combine
FP8 recipes, MoE and expert parallelism, context parallelism and its three communications,
uneven pipeline splits, HSDP shard groups, reshard_after_forward, prefetch depth, the three
implementations, torch.compile, the three frameworks with the training.deepspeed section
(Muon under ZeRO at reduce_scatter false), the optimizers (adamw8bit and muon too), NeMo's
apex optimizer (training.distributed_optimizer: apex, its fp32 word-embedding gradients),
tied embeddings, offload to DRAM / NVMe / HBF, checkpoints (async ones measured apart) and
interleaved stages long enough for one measured period, and checks each (docs/invariants.md):

    a  more bandwidth on one link or tier, or a faster GPU, never slows a step
    b  unlimited bandwidth and no latency everywhere expose no transfer and no collective
    c  bytes are conserved (links, tier ports, classes read and written)
    d  no utilisation or share above 1, no negative time or bytes in report.json
    e  the memory peak never falls as the micro-batch grows (each pipeline stage's allocated
       peak); `fits` agrees with the peak; each memory timeline (GPU, host) by construction:
       its peak the largest running total of its events, its parts positive and adding up
    g  an async checkpoint's copy in closed form equals the copy simulated, and one measured
       period of an interleaved stage equals two compared, wherever each applies
    f  no crash: a combination the tool cannot model is an InputError (exit 2) or an
       InfeasibleError (exit 3)

Prints each violation with the scenario that shows it (as JSON), then a count per invariant
and how often each shortcut of (g) applied (`compared`).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from forced_paths import closed_copy_differs, one_period_differs
from invariant_checks import (
    FASTER,
    MODEL,
    check_report,
    faster_scenario,
    interval_slower,
    merge,
    peaks_fall,
    placement_moves,
    stage_peaks,
    timeline_violations,
    unlimited_scenario,
)

from tiersim import api
from tiersim.core.errors import InfeasibleError, InputError

TIERS = ("hbm", "dram", "nvme", "hbf")


def draw(rng: random.Random) -> dict:
    """One random scenario (a mapping as a YAML file gives it)."""
    moe = rng.random() < 0.4
    model = dict(MODEL)
    if moe:
        model |= {
            "experts": 4,
            "experts_per_token": 2,
            "shared_experts": rng.choice([0, 1]),
        }
    training = {
        "seq_len": rng.choice([256, 512]),
        "micro_batch_size": rng.choice([1, 2]),
        "grad_accumulation": rng.choice([1, 2, 4]),
        "optimizer": rng.choice(
            ["adamw", "adamw", "sgd", "adafactor", "muon", "muon", "adamw8bit", "adamw8bit"]
        ),
        "recompute": rng.choice(["none", "selective", "full", "selective_op"]),
        "implementation": rng.choice(["megatron", "huggingface", "torchtitan"]),
        "framework": rng.choice([None, "deepspeed", "fsdp", "megatron"]),
        "optimizer_step": rng.choice(["synchronous", "synchronous", "pipelined", "delayed"]),
    }
    if rng.random() < 0.5:
        training["fp8"] = {
            "recipe": rng.choice(["tensorwise", "delayed", "rowwise", "blockwise"]),
            "attention": rng.random() < 0.2,
        }
    # mostly combinations the tool models (a few refusals kept to check their exit)
    if training["implementation"] == "torchtitan" and moe and rng.random() < 0.9:
        training["implementation"] = "huggingface"
    if training["recompute"] == "selective_op" and rng.random() < 0.9:
        training["implementation"] = "torchtitan"
        if moe:
            training["recompute"] = "selective"
            training["implementation"] = "huggingface"
    if rng.random() < 0.3 and training["implementation"] != "megatron" and not moe:
        training["compile"] = rng.random() < 0.5
    if training["framework"] == "deepspeed" and rng.random() < 0.6:
        training["deepspeed"] = {
            "version": rng.choice(["latest", "0.3.10", "0.14.0"]),
            "reduce_scatter": rng.random() < 0.5,
        }
    data = rng.choice([1, 2, 4, 8, 16])
    par = {
        "data": data,
        "tensor": rng.choice([1, 1, 2]),
        "pipeline": rng.choice([1, 1, 2]),
        "context": rng.choice([1, 1, 2]),
        "zero_stage": rng.choice([0, 1, 2, 3]),
    }
    par["context_comm"] = rng.choice(["ring", "all_gather", "all_to_all"])
    if par["pipeline"] == 2 and rng.random() < 0.5:
        par["stage_layers"] = rng.choice([[1, 3], [3, 1], [2, 2], [0, 4]])
    if par["pipeline"] == 2 and rng.random() < 0.5:
        par["virtual_pipeline"] = 2
        par.pop("stage_layers", None)
    if par["tensor"] == 2:
        par["sequence"] = rng.random() < 0.5
    if moe:
        par["expert"] = rng.choice([1, 2, 4])
        par["expert_imbalance"] = rng.choice([1, 1.5])
        par["overlap_expert_comm"] = rng.random() < 0.5
    if data >= 4 and rng.random() < 0.4:
        par["shard_group"] = rng.choice([2, data // 2])
    if par["pipeline"] > 1 and training.get("framework") == "deepspeed":
        par["zero_stage"] = rng.choice([0, 1])
    if moe and par["expert"] > data:
        par["expert"] = 1
    if par["zero_stage"] == 3 and rng.random() < 0.5:
        par["reshard_after_forward"] = rng.random() < 0.5
    placement: dict = {}
    for cls in ("weights", "gradients", "master", "optimizer", "activations"):
        if rng.random() < 0.3:
            placement[cls] = rng.choice(TIERS[1:])
    if rng.random() < 0.3:
        placement["optimizer_compute"] = "cpu"
    if moe and rng.random() < 0.3:
        placement["experts"] = {"optimizer": rng.choice(TIERS[1:]), "master": "dram"}
    if training.get("framework") == "megatron" and rng.random() < 0.9:
        placement = {}
    plain = _newer(rng, model, training, par, placement)
    raw = {
        "name": "explore",
        "model": model,
        "training": {k: v for k, v in training.items() if v is not None},
        "parallel": par,
        "placement": placement,
        "hardware": {"preset": "h200-hbf"},
    }
    if rng.random() < 0.3:
        raw["simulation"] = {"prefetch_depth": rng.choice([1, 2, 3])}
    if not plain and rng.random() < 0.35:
        raw["checkpoint"] = {
            "every_steps": rng.choice([2, 10, 100]),
            "target": rng.choice(["nvme", "nvme", "hbf", "dram"]),
            "mode": rng.choice(["blocking", "async", "async"]),
        }
        raw["failures"] = {"mtbf": "3 h"}
        if raw["checkpoint"] == {**raw["checkpoint"], "mode": "async", "target": "dram"}:
            raw["checkpoint"]["staging"] = "hbf"  # the default staging, dram, is refused
        if raw["checkpoint"]["mode"] == "async" and rng.random() < 0.7:  # measured apart
            raw["training"] |= {"grad_accumulation": rng.choice([16, 32])}
            raw["training"]["optimizer_step"] = "synchronous"
    return raw


def _newer(rng: random.Random, model: dict, training: dict, par: dict, placement: dict) -> bool:
    """The keys added since seeds 4 to 10 were run (docs/invariants.md): Muon under ZeRO
    with reduce_scatter false (true refused), NeMo's apex optimizer with its fp32
    word-embedding gradients (tied or not, learned positions or not), interleaved stages long
    enough for one measured period. True: an interleaved one where that is tried (then no
    checkpoint is drawn)."""
    if rng.random() < 0.3:
        model["tied_embeddings"] = True
    if model.get("shared_experts") and training["implementation"] == "huggingface":
        model["shared_experts"] = rng.choice([0, 0, 0, 1])  # megatron's alone (1: refused)
    if training["implementation"] == "megatron" and rng.random() < 0.3:
        model["position"] = "learned"  # with rope, the Llama-style layer compile needs
    ds = training.get("framework") == "deepspeed"
    if ds and training["optimizer"] == "muon" and par["zero_stage"] > 0 and rng.random() < 0.9:
        training["deepspeed"] = {**training.get("deepspeed", {}), "reduce_scatter": False}
    if training.get("framework") == "megatron" and rng.random() < 0.5:
        training["distributed_optimizer"] = "apex"
        training["optimizer"] = rng.choice(["adam", "adamw"])
        training["precision"] = {"master": "bf16"}
        par["zero_stage"] = 1
        apex: dict = {"contiguous_param_buffer": rng.random() < 0.5}
        if rng.random() < 0.5:
            apex["bucket_cap_mb"] = rng.choice([1, 125])
        training["apex"] = apex
    if par.get("virtual_pipeline") and rng.random() < 0.6:
        training["grad_accumulation"] = rng.choice([16, 32, 64])  # one period measured
        if rng.random() < 0.6:  # where it is tried: nothing fetched, reduced beside, saved
            par |= {"data": 1, "zero_stage": 0, "context": 1, "expert": 1}
            par.pop("shard_group", None)
            par.pop("reshard_after_forward", None)
            placement.clear()
            return True
    return False


def run(raw: dict) -> dict:
    return api.run(api.build(raw)).report


def timelines(lifecycle) -> list[str]:
    """(e) on the GPU's and the host's memory timelines, by construction."""
    report = lifecycle.report
    out = timeline_violations(lifecycle.memory_timeline, report["memory_timeline"])
    host = lifecycle.host_timeline
    if host is not None:
        section = report.get("host_memory_timeline")
        out += [f"host {v}" for v in timeline_violations(host.timeline, section)]
    return [f"e timeline: {v}" for v in out]


def shortcuts(raw: dict, seen: dict[str, int]) -> list[str]:
    """(g) the closed-form async copy and the one-period measurement against what they
    stand for; `seen` counts where each applied (and was compared)."""
    out = []
    ck = raw.get("checkpoint", {})
    if ck.get("mode") == "async":
        answer, diffs = closed_copy_differs(raw)
        key = "closed copy" if answer == "closed" else f"copy simulated: {answer[:50]}"
        seen[key] = seen.get(key, 0) + 1
        out += [f"g closed copy != simulated: {d}" for d in diffs[:5]]
    if raw["parallel"].get("virtual_pipeline", 1) > 1:
        tried, diffs = one_period_differs(raw)
        key = "one period" if tried else "two periods"
        seen[key] = seen.get(key, 0) + 1
        out += [f"g one period != two: {d}" for d in diffs[:5]]
    return out


def explore_one(raw: dict, knobs: list[str], seen: dict[str, int]) -> tuple[str, list[str]]:
    """('refused' | 'ok', violations) for one drawn scenario."""
    try:
        lifecycle = api.run(api.build(raw)).lifecycle
        base = lifecycle.report
    except (InputError, InfeasibleError) as e:
        return "refused", [f"r {str(e).splitlines()[0][:200]}"]
    except Exception:
        return "ok", ["f crash: " + traceback.format_exc(limit=6)]
    out = [f"d/c/e {v}" for v in check_report(base) + placement_moves(raw, base)]
    try:
        out += timelines(lifecycle) + shortcuts(raw, seen)
    except Exception:
        out.append("f crash in the timeline or shortcut checks: " + traceback.format_exc(limit=6))
    ordered = merge(raw, {"simulation": {"link_sharing": "ordered"}})
    try:
        slow_report = run(ordered)
    except Exception:
        return "ok", [*out, "f crash under ordered: " + traceback.format_exc(limit=6)]
    slow_ordered = slow_report["step"]["time_s"]
    for knob in knobs:
        try:
            fast = run(faster_scenario(raw, knob))
            fast_report = run(faster_scenario(ordered, knob))
            fast_ordered = fast_report["step"]["time_s"]
        except Exception as e:
            out.append(f"f crash with faster {knob}: {type(e).__name__}: {e}")
            continue
        t0, t1 = base["step"]["time_s"], fast["step"]["time_s"]
        if fast_ordered > slow_ordered * (1 + 1e-9):  # strict: ordered sharing is monotone
            out.append(
                f"a faster {knob} (ordered): {slow_ordered:.6g} s -> {fast_ordered:.6g} s "
                f"({fast_ordered / slow_ordered - 1:+.3%})"
            )
        out += [
            f"a faster {knob} (ordered): {v}" for v in interval_slower(slow_report, fast_report)
        ]
        if t1 > t0 * (1 + 1e-9):  # fair sharing: measured (docs/invariants.md)
            out.append(f"A faster {knob} (fair): {t0:.6g} s -> {t1:.6g} s ({t1 / t0 - 1:+.3%})")
    try:
        unl = run(unlimited_scenario(raw))
        step = unl["step"]
        for key in ("exposed_transfer_s", "exposed_collective_s"):
            if step[key] > 1e-6 * step["time_s"]:
                out.append(f"b unlimited: {key} = {step[key]:.6g} s of {step['time_s']:.6g} s")
    except Exception as e:
        out.append(f"f crash unlimited: {type(e).__name__}: {e}")
    mb = raw["training"].get("micro_batch_size", 1)
    bigger = copy.deepcopy(raw)
    bigger["training"]["micro_batch_size"] = mb * 2
    try:
        big = api.run(api.build(bigger)).lifecycle
        stages = raw["parallel"].get("pipeline", 1)
        out += [f"e {v}" for v in peaks_fall(base, big.report, stages)]
        for k, (a, b) in enumerate(zip(stage_peaks(lifecycle), stage_peaks(big), strict=True)):
            if b < a:
                out.append(f"e stage {k}'s allocated peak falls with micro-batch x2: {a} -> {b}")
    except (InputError, InfeasibleError):
        pass
    except Exception as e:
        out.append(f"f crash micro-batch x2: {type(e).__name__}: {e}")
    return "ok", out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="random scenarios (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--budget", type=float, default=600, help="seconds at most (default 600)")
    parser.add_argument(
        "--refusals",
        action="store_true",
        help="print each refusal too (counted under counts.refused, not as a violation)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.monotonic()
    counts: dict[str, int] = {"ok": 0, "refused": 0}
    kinds: dict[str, int] = {}
    seen: dict[str, int] = {}
    for i in range(args.cases):
        if time.monotonic() - start > args.budget:
            break
        raw = draw(rng)
        status, violations = explore_one(raw, list(FASTER), seen)
        counts[status] += 1
        for v in violations:
            refusal = v.startswith("r ")  # a result (f holds), printed, never a violation
            if refusal and not args.refusals:
                continue
            if not refusal:
                kinds[v[0]] = kinds.get(v[0], 0) + 1
            print(f"case {i}: {v}\n  {json.dumps(raw)}", flush=True)
    print(json.dumps({"counts": counts, "compared": seen, "violations": kinds}))


if __name__ == "__main__":
    main()
