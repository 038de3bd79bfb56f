"""The invariants of docs/invariants.md on a wider draw and on the shipped scenarios.

    nice .venv/bin/python benchmarks/explore_wide.py [--cases 100] [--seed 21] [--budget 600]
    nice .venv/bin/python benchmarks/explore_wide.py --shipped

Draws as benchmarks/explore_invariants.py does, then widens each scenario (one to three of:
the scale's extremes, 1 or 256 to 1,024 micro-batches, 2 to 16,384 GPUs; DeepSpeed's offload
keys with parameters on NVMe (ZeRO-Infinity); FSDP2's prefetch and reshard; every class homed
on HBF; `recompute_every` and `recompute_modules`; micro-batches of 4 and 8). Each knob of the
machine (tests/wide_checks.py `knobs`) is perturbed at a factor drawn from 1.1, 4, 100 and
unlimited, under `ordered`. Besides (a) to (e) (tests/invariant_checks.py) it checks (h) to
(l) (tests/wide_checks.py): the step's parts, peaks over residents, more HBM capacity, a
checkpoint never faster, the wear arithmetic; and (g) a step extrapolated from samples
against the step simulated in full (up to 256 micro-batches). `--shipped` runs every
scenarios/*.yaml with every knob at 4 x and unlimited. Prints each violation with its
scenario (JSON), then counts.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from explore_invariants import draw
from invariant_checks import check_report, interval_slower, merge
from test_steady import differences
from wide_checks import (
    checkpoint_slows,
    knobs,
    parts_add_up,
    peaks_hold,
    priced_share,
    still_fits,
    unlimited,
    wear_adds_up,
)

from tiersim import api
from tiersim.analysis.checkpoint import daly_interval, young_interval
from tiersim.core.errors import InfeasibleError, InputError

FACTORS = (1.1, 4.0, 100.0, math.inf)
ROOT = Path(__file__).resolve().parent.parent


def _scale(rng: random.Random, raw: dict) -> None:
    tr, par = raw["training"], raw["parallel"]
    if rng.random() < 0.5:
        tr["grad_accumulation"] = rng.choice([1, 256, 1024])
        if par.get("virtual_pipeline", 1) > 1 and tr["grad_accumulation"] == 1:
            tr["grad_accumulation"] = 256  # interleaving needs a multiple of the stages
    else:
        others = par.get("tensor", 1) * par.get("pipeline", 1) * par.get("context", 1)
        par["data"] = max(1, rng.choice([2, 16384]) // others)
        par.pop("shard_group", None)
        if par.get("expert", 1) > par["data"]:
            par["expert"] = 1


def _offload(rng: random.Random, raw: dict) -> None:
    tr, par = raw["training"], raw["parallel"]
    for key in ("distributed_optimizer", "apex"):  # NeMo's, Megatron's alone
        tr.pop(key, None)
    if rng.random() < 0.5:  # ZeRO-Infinity: parameters (and the optimizer) on NVMe
        tr["framework"] = "deepspeed"
        if tr["optimizer"] == "muon":  # DeepSpeed refuses Muon with its reduce-scatter
            tr["deepspeed"] = {**tr.get("deepspeed", {}), "reduce_scatter": False}
        par |= {"zero_stage": 3, "pipeline": 1}
        par.pop("stage_layers", None), par.pop("virtual_pipeline", None)
        home = rng.choice(["nvme", "dram"])
        raw["placement"] = {"weights": "nvme", "gradients": "dram", "master": home}
        raw["placement"] |= {"optimizer": home, "optimizer_compute": "cpu"}
        tr["offload"] = {
            "sub_group_size": rng.choice([100_000, 1_000_000_000]),
            "pipeline_read": rng.random() < 0.5,
            "pipeline_write": rng.random() < 0.5,
            "buffer_count": rng.choice([2, 4, 5]),
            "max_live_parameters": rng.choice([100_000, 1_000_000_000]),
            "tiling": rng.random() < 0.3,
        }
    else:  # FSDP2: prefetch and reshard
        tr["framework"] = "fsdp"
        if tr.get("fp8"):
            tr["fp8"]["attention"] = False  # torchao's Float8Linear converts the linears only
        par["zero_stage"] = 3
        par["reshard_after_forward"] = rng.random() < 0.5
        raw["simulation"] = {"prefetch_depth": rng.choice([1, 2, 4])}


def _homes(rng: random.Random, raw: dict) -> None:
    if raw["training"].get("framework") == "megatron":  # Megatron-LM offloads nothing
        raw["training"]["framework"] = None
        for key in ("distributed_optimizer", "apex"):
            raw["training"].pop(key, None)
    if rng.random() < 0.5:
        cls = rng.choice(["weights", "gradients", "master", "optimizer", "activations"])
        raw["placement"] = {**raw.get("placement", {}), cls: "hbf"}
    else:
        raw["placement"] = {c: "hbf" for c in ("weights", "master", "optimizer")}


def _recompute(rng: random.Random, raw: dict) -> None:
    tr = raw["training"]
    if rng.random() < 0.5:
        tr |= {"recompute": "full", "recompute_every": rng.choice([1, 2, 3])}
    else:
        tr |= {"recompute": "selective", "implementation": "megatron"}
        modules = ["core_attn", "mlp", "layernorm"] + (
            ["moe"] if raw["model"].get("experts") else []
        )
        tr["recompute_modules"] = rng.sample(modules, 2)
    tr["micro_batch_size"] = rng.choice([1, 4, 8])


WIDEN = (_scale, _offload, _homes, _recompute)


def widen(rng: random.Random) -> dict:
    raw = draw(rng)
    for fn in rng.sample(WIDEN, rng.choice([1, 2, 3])):
        fn(rng, raw)
    if "checkpoint" not in raw and rng.random() < 0.4:
        raw["checkpoint"] = {"every_steps": rng.choice([2, 10]), "target": "nvme"}
        raw["checkpoint"]["mode"] = rng.choice(["blocking", "async"])
    return raw


def _lifecycle(raw: dict):
    return api.run(api.build(raw)).lifecycle


def _report(raw: dict) -> dict:
    return api.run(api.build(raw)).report


def _knob_checks(raw: dict, machine, picks: list[tuple[str, float]]) -> list[str]:
    """(a) strictly under `ordered` for each (knob, factor) in `picks`."""
    ordered = merge(raw, {"simulation": {"link_sharing": "ordered"}})
    slow = _report(ordered)
    out = []
    for name, factor in picks:
        over = knobs(machine, factor)[name]
        try:
            fast = _report(merge(ordered, {"hardware": over}))
        except Exception as e:
            out.append(f"f crash with {name} x {factor}: {type(e).__name__}: {str(e)[:300]}")
            continue
        t0, t1 = slow["step"]["time_s"], fast["step"]["time_s"]
        if t1 > t0 * (1 + 1e-9):
            out.append(
                f"a {name} x {factor} (ordered): {t0:.9g} -> {t1:.9g} s ({t1 / t0 - 1:+.3%})"
            )
        out += [f"a {name} x {factor} (ordered): {v}" for v in interval_slower(slow, fast)]
    return out


def _capacity_checks(raw: dict, base: dict) -> list[str]:
    """(j) 1.5 x the GPU tier's capacity; (k) the run without its checkpoint, or with one."""
    gpu = base["memory_timeline"]["tier"]
    cap = base["tiers"][gpu]["capacity_bytes"]
    more = merge(raw, {"hardware": {"tiers": {gpu: {"capacity": f"{int(cap * 1.5)} B"}}}})
    out = [f"j {v}" for v in still_fits(base, _report(more))]
    ordered = {"simulation": {"link_sharing": "ordered"}}
    if raw.get("checkpoint"):
        plain = {k: v for k, v in raw.items() if k not in ("checkpoint", "failures")}
        a, b = _report(merge(plain, ordered)), _report(merge(raw, ordered))
        out += [f"k {v}" for v in checkpoint_slows(a, b)]
    return out


def check_all(raw: dict, rng: random.Random, every_knob: bool = False) -> tuple[str, list[str]]:
    try:
        lifecycle = _lifecycle(raw)
    except (InputError, InfeasibleError) as e:
        return "refused", [f"r {str(e).splitlines()[0][:200]}"]
    except Exception:
        return "ok", ["f crash: " + traceback.format_exc(limit=6)]
    base = lifecycle.report
    out = [f"c/d/e {v}" for v in check_report(base)]
    out += [f"h {v}" for v in parts_add_up(base)] + [f"i {v}" for v in peaks_hold(base)]
    out += [f"l {v}" for v in wear_adds_up(base)]
    if priced_share(base) > 1 + 1e-9:  # measured, not a violation (docs/invariants.md)
        out.append(f"H priced parts {priced_share(base):.6f} of the step")
    machine = lifecycle.resolved.machine
    names = list(knobs(machine, 2.0))
    if every_knob:
        picks = [(n, f) for n in names for f in (4.0, math.inf)]
    else:
        picks = [(n, rng.choice(FACTORS)) for n in rng.sample(names, min(4, len(names)))]
    for step in (
        lambda: _extrapolation(raw, base),
        lambda: _knob_checks(raw, machine, picks),
        lambda: _capacity_checks(raw, base),
        lambda: _unlimited(raw, machine),
    ):
        try:
            out += step()
        except (InputError, InfeasibleError) as e:
            out.append(f"f refused a variant of a run that ran: {str(e).splitlines()[0][:200]}")
        except Exception:
            out.append("f crash in a variant: " + traceback.format_exc(limit=6))
    return "ok", out


def _extrapolation(raw: dict, base: dict) -> list[str]:
    """(g) a step extrapolated from samples is the step simulated in full (tests/test_steady.py
    `differences`: every figure but `sim`), up to 256 micro-batches."""
    if base["sim"]["steady_state"] != "extrapolated" or base["step"]["micro_batches"] > 256:
        return []
    full = _report(merge(raw, {"simulation": {"steady_state": "full"}}))
    step_s = full["step"]["time_s"]
    return [f"g extrapolated != full: {d}" for d in _differ(full, base, step_s)[:5]]


def _differ(full: dict, fast: dict, step_s: float) -> list[str]:
    """`differences`, but a figure within 1e-12 of the step of its full value (seconds a link
    was busy for nanoseconds, their shares) is round-off (tiersim/engine/steady.py), and an
    optimal interval that is its formula of each report's stall (`_carried`) is judged on
    the stall."""
    out = []
    for d in differences(full, fast, step_s):
        path, _, rest = d.partition(": ")
        if _carried(path, full, fast):
            continue
        got, _, want = rest.removesuffix(")").partition(" (full: ")
        try:
            apart = abs(float(got) - float(want))
        except ValueError:
            apart = math.inf
        if apart <= 1e-12 * step_s or _share_round_off(path, apart, full, step_s):
            continue
        out.append(d)
    return out


def _share_round_off(path: str, apart: float, full: dict, step_s: float) -> bool:
    """`step.overlap` is a share of the time any link is busy (tiersim/engine/metrics.py),
    at most the links' busy seconds added up: where those are microseconds of a long step,
    the step's round-off (1e-12 of it, as above) in the seconds it is a share of moves it
    far more than 1e-12 of the step (seed 60 case 167: 8.9e-11 apart over 1.0 ms of link
    time in a 6.8 s step, 9e-14 s). Round-off where the share's difference over those
    seconds (and the share's own over its denominator's) is within it."""
    if path != ".step.overlap":
        return False
    busy = sum(link.get("busy_s") or 0.0 for link in full["links"].values())
    share = full["step"]["overlap"] or 0.0
    return apart * busy <= 1e-12 * step_s * (1 + share)


def _carried(path: str, full: dict, fast: dict) -> bool:
    """An optimal interval (Young's, Daly's: tiersim/analysis/checkpoint.py) that in both
    reports is its formula of the report's own stall and MTBF: the two differ only as far as
    the stalls do, carried through the square root (about interval / (2 x stall) times the
    stalls' difference: 2.4e5 x at seed 56 case 88's stall of 92 ns, 3.6e-15 s apart in a
    29.09 s step, 1.9e-8 of the interval), and `differences` judges `stall_s` itself."""
    if not path.startswith(".checkpoint.optimal_interval_s."):
        return False
    formula = {"young": young_interval, "daly": daly_interval}.get(path.rsplit(".", 1)[1])
    sections = [r["checkpoint"] for r in (full, fast)]
    return formula is not None and all(
        math.isclose(
            c["optimal_interval_s"][path.rsplit(".", 1)[1]],
            formula(c["stall_s"], c["mtbf_s"]),
            rel_tol=1e-12,
        )
        for c in sections
    )


def _unlimited(raw: dict, machine) -> list[str]:
    """(b) unlimited bandwidth and no latency everywhere expose nothing."""
    step = _report(merge(raw, {"hardware": unlimited(machine)}))["step"]
    return [
        f"b unlimited: {k} = {step[k]:.6g} s of {step['time_s']:.6g} s"
        for k in ("exposed_transfer_s", "exposed_collective_s")
        if step[k] > 1e-6 * step["time_s"]
    ]


def _shipped() -> list[tuple[str, dict]]:
    return [(p.name, yaml.safe_load(p.read_text())) for p in sorted(ROOT.glob("scenarios/*.yaml"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--budget", type=float, default=600, help="seconds at most")
    parser.add_argument("--shipped", action="store_true", help="the shipped scenarios instead")
    args = parser.parse_args()
    rng, start = random.Random(args.seed), time.monotonic()
    counts: dict[str, int] = {"ok": 0, "refused": 0}
    kinds: dict[str, int] = {}
    cases = _shipped() if args.shipped else ((str(i), None) for i in range(args.cases))
    for label, raw in cases:
        if time.monotonic() - start > args.budget:
            break
        raw = raw if raw is not None else widen(rng)
        status, violations = check_all(raw, rng, every_knob=args.shipped)
        counts[status] += 1
        for v in violations:
            if not v.startswith("r "):
                kinds[v[0]] = kinds.get(v[0], 0) + 1
                print(f"case {label}: {v}\n  {json.dumps(raw)}", flush=True)
    print(json.dumps({"counts": counts, "violations": kinds}))


if __name__ == "__main__":
    main()
