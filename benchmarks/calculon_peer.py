"""Calculon (Isaev et al., SC'23), run from its source in the same process as tiersim.

Calculon's source lives beside the project (`../shared/peers/calculon`, or the folder named by
`$CALCULON_SRC`); it is imported from there, unchanged, and evaluates the eight Korthikanti et
al. 2022 Table 5 configurations with its own files: the model (`models/<model>.json`), the
execution (`validation/seqsel/tab5/<model>_<mode>.json`) and the machine
(`systems/a100_80g.json`), exactly as its `llm-validation` command does (seqsel_tab5).

Calculon's package `__init__` imports its search commands too (`llm-all-executions`,
`llm-optimal-execution`), which import pandas and psutil at module level; a single evaluation
(`Llm.compile` + `Llm.run`) never touches either. Where they are not installed, empty modules
stand in for them while the package imports (and are removed after, so that no other library
takes them for the real ones); nothing of Calculon's evaluation is replaced.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scenarios" / "published"

# Korthikanti et al. 2022 Table 5: Calculon's (model, mode) -> tiersim's scenario file
TABLE5 = {
    ("megatron-22B", "seqsel"): "korthikanti2022-22b-selective-sp.yaml",
    ("megatron-22B", "full"): "korthikanti2022-22b-full-recompute.yaml",
    ("gpt3-175B", "seqsel"): "korthikanti2022-175b-selective-sp.yaml",
    ("gpt3-175B", "full"): "korthikanti2022-175b-full-recompute.yaml",
    ("turing-530B", "seqsel"): "korthikanti2022-530b-selective-sp.yaml",
    ("turing-530B", "full"): "korthikanti2022-530b-full-recompute.yaml",
    ("megatron-1T", "seqsel"): "korthikanti2022-1t-selective-sp.yaml",
    ("megatron-1T", "full"): "korthikanti2022-1t-full-recompute.yaml",
}


def source() -> Path:
    """Calculon's source folder: $CALCULON_SRC, else `shared/peers/calculon` beside the
    checkout (or beside the folder of worktrees holding it)."""
    candidates = [os.environ.get("CALCULON_SRC")]
    candidates += [str(up / "shared" / "peers" / "calculon") for up in ROOT.parents[:2]]
    for candidate in filter(None, candidates):
        if (Path(candidate) / "calculon" / "llm" / "llm.py").is_file():
            return Path(candidate)
    raise SystemExit("Calculon's source not found: set CALCULON_SRC to its folder")


def _import_calculon(src: Path):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    stubs = []
    for name in ("pandas", "psutil"):  # only its search commands use these (module docstring)
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
            stubs.append(name)
    try:
        import calculon
        from calculon.llm import Llm
    finally:  # gone once Calculon is imported: others (pyarrow) look for the real pandas
        for name in stubs:
            del sys.modules[name]
    return calculon, Llm


class Calculon:
    """One Calculon evaluation per call, from its files, as its validation runs it."""

    def __init__(self) -> None:
        self.src = source()
        self.calculon, self.Llm = _import_calculon(self.src)
        self.log = logging.getLogger("calculon")

    def evaluate(self, model: str, mode: str) -> float:
        """Read the three files, compile and run: the step time Calculon predicts, seconds."""
        c, Llm, src = self.calculon, self.Llm, self.src
        system = c.System(c.read_json_file(str(src / "systems" / "a100_80g.json")))
        app = Llm.Application(c.read_json_file(str(src / "models" / f"{model}.json")))
        exe_file = src / "validation" / "seqsel" / "tab5" / f"{model}_{mode}.json"
        exe = Llm.Execution.from_json(c.read_json_file(str(exe_file)))
        llm = Llm(app, self.log)
        llm.compile(system, exe)
        llm.run(system)
        return llm.get_stats_json(False)["total_time"]


def tiersim_evaluate(scenario: str) -> float:
    """Load the scenario file and simulate it: the step time tiersim predicts, seconds."""
    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate

    return simulate(load_scenario(PUBLISHED / scenario, []).scenario).time_s


def cpu_s(fn, *args, repeats: int) -> tuple[float, object]:
    """Least CPU seconds (time.process_time) of `repeats` calls, and the last call's value."""
    best, value = float("inf"), None
    for _ in range(repeats):
        started = time.process_time()
        value = fn(*args)
        best = min(best, time.process_time() - started)
    return best, value


def table5(repeats: int = 7) -> list[dict]:
    """Each configuration: tiersim and Calculon timed in turn in this process (a round of
    each, `repeats` rounds, the least CPU time of each kept), their step times and ratio."""
    peer = Calculon()
    rows = []
    for (model, mode), scenario in TABLE5.items():
        tiersim_evaluate(scenario)  # warm: first-call imports and caches, both sides
        peer.evaluate(model, mode)
        ours = theirs = float("inf")
        for _ in range(repeats):
            t, step = cpu_s(tiersim_evaluate, scenario, repeats=1)
            c, calc_step = cpu_s(peer.evaluate, model, mode, repeats=1)
            ours, theirs = min(ours, t), min(theirs, c)
        rows.append(
            {
                "config": f"{model} {mode}",
                "scenario": scenario,
                "tiersim_s": ours,
                "calculon_s": theirs,
                "ratio": ours / theirs,
                "tiersim_step_s": step,
                "calculon_step_s": calc_step,
            }
        )
    return rows


def print_table5(repeats: int = 7) -> list[dict]:
    rows = table5(repeats)
    print(
        f"Korthikanti Table 5 in-process, CPU ms (least of {repeats}, tiersim and Calculon "
        "in turn; tiersim: load + simulate; Calculon: read files + compile + run)"
    )
    print(f"{'configuration':<22} {'tiersim ms':>10} {'Calculon ms':>11} {'ratio':>7}  step s")
    for r in rows:
        print(
            f"{r['config']:<22} {1e3 * r['tiersim_s']:10.2f} {1e3 * r['calculon_s']:11.2f} "
            f"{r['ratio']:6.2f}x  {r['tiersim_step_s']:.2f} / {r['calculon_step_s']:.2f}",
            flush=True,
        )
    one_t = next(r for r in rows if r["config"] == "megatron-1T seqsel")
    worst = max(rows, key=lambda r: r["ratio"])
    print(
        f"targets: 1T <= 2x Calculon ({one_t['ratio']:.2f}x); every configuration <= 3x "
        f"(worst {worst['config']}: {worst['ratio']:.2f}x)"
    )
    return rows
