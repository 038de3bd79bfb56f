"""How far the imports' share of a default `tiersim run` could fall, at best, by the two remedies
docs/startup.md weighs: a scenario validated without pydantic, and tiersim's dataclasses made
with fewer generated methods (issue 36's target: imports <= 40 % of the run's CPU time).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_startup_bounds.py [--repeat 7] [SCENARIO]

- Taking turns, `--repeat` rounds, the least user + system CPU of each kept (as
  bench_startup.py): the run, a process importing exactly the run's modules, a bare interpreter,
  one that imports the scenario's schema (`import tiersim.config.schema`: pydantic, its first
  model, the 23 models, and the modules they import), and one that imports only those of the
  latter that a run without pydantic would still import (YAML, importlib.metadata, the units,
  the presets, the optimizer classes): the schema's stage is the difference.
- Bound A: the share were all of the schema's stage gone from the run and the validation that
  replaced it free: (imports - schema) / (run - schema). Optimistic: the fast path's own import
  and work are counted as nothing, and every stdlib module pydantic alone imports as saved.
- One run instrumented: each tiersim dataclass, as the run creates it, made again (least of 5)
  with fewer generated methods (`eq=False`, `repr=False`, not frozen, `__init__` alone) and
  with `slots=True` (which makes a second class).
  Bounds B and C: bound A less the most those could save (the run's own creation time, cold,
  less the variant's, warm): B with the records still frozen but no `__eq__`, `__hash__` or
  `__repr__` generated, C with every dataclass an `__init__` alone (mutable, compared and
  hashed by identity).
- The same run counts what it asks of the scenario's pydantic models (what a plain-object fast
  path would have to reproduce) and the tiersim modules it imports that import
  tiersim.config.schema at module level (each would import pydantic with it).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bench_startup import RUN_IN_CHILD, arguments, child_cpu_s, importer, listed_run

_PROBE = r"""
import collections, dataclasses, json, pathlib, re, runpy, sys, time
from pydantic import BaseModel

plain, made, calls = dataclasses.dataclass, [], collections.Counter()

def counted(name, method):
    def call(self, *args, **kwargs):
        calls[f"{name} ({type(self).__name__})"] += 1
        return method(self, *args, **kwargs)
    return call

def timed(cls=None, /, **options):
    def wrap(cls):
        if not cls.__module__.startswith("tiersim"):
            return plain(**options)(cls)
        body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
        start = time.process_time()
        done = plain(**options)(cls)
        made.append((options, time.process_time() - start, (cls.__name__, cls.__bases__, body)))
        for method in ("__eq__", "__hash__"):  # which records the run compares or hashes
            if done.__dict__.get(method):
                setattr(done, method, counted(f"dataclass {method}", done.__dict__[method]))
        return done
    return wrap if cls is None else wrap(cls)

dataclasses.dataclass = timed
for name in ("model_copy", "model_dump", "model_dump_json", "__eq__"):
    setattr(BaseModel, name, counted(name, getattr(BaseModel, name)))
import tiersim.config.schema  # the models, to count their hashes too
models = [BaseModel]
for model in models:
    models += model.__subclasses__()
    if model.__dict__.get("__hash__"):
        model.__hash__ = counted("__hash__", model.__dict__["__hash__"])
fields_set = BaseModel.__dict__["model_fields_set"]
BaseModel.model_fields_set = property(counted("model_fields_set", fields_set.__get__))
"""
_PROBE += (
    RUN_IN_CHILD
    + r"""

def remade(change):
    total = 0.0
    for options, _, (name, bases, body) in made:
        best = float("inf")
        for _ in range(5):
            for chosen in (change(dict(options)), {**change(dict(options)), "frozen": True}):
                cls = type(name, bases, dict(body))
                start = time.process_time()
                try:  # a frozen base keeps its subclasses frozen
                    plain(**chosen)(cls)
                except TypeError:
                    continue
                best = min(best, time.process_time() - start)
                break
        total += best
    return total

variants = {
    "as written": lambda o: o,
    "eq=False": lambda o: {**o, "eq": False},
    "repr=False": lambda o: {**o, "repr": False},
    "not frozen": lambda o: {**o, "frozen": False},
    "slots=True": lambda o: {**o, "slots": True},
    "eq, repr off (still frozen)": lambda o: {**o, "eq": False, "repr": False},
    "__init__ alone": lambda o: {
        **o, "eq": False, "repr": False, "frozen": False, "match_args": False
    },
}
files = [getattr(sys.modules[m], "__file__", None) for m in sys.modules if m.startswith("tiersim")]
ours = [pathlib.Path(f).read_text() for f in files if f]
schema = re.compile(r"^from tiersim\.config\.schema import", re.M)
json.dump({
    "classes": len(made),
    "frozen": sum(1 for options, _, _ in made if options.get("frozen")),
    "as_run_s": sum(t for _, t, _ in made),
    "variants_s": {k: remade(v) for k, v in variants.items()},
    "calls": dict(calls),
    "modules": len(ours),
    "schema_importers": sum(bool(schema.search(text)) for text in ours),
}, open(out + ".probe.json", "w"))
"""
)

# what `import tiersim.config.schema` imports that a run without pydantic still would (SimPy
# imports importlib.metadata for its version; none of these imports pydantic)
_KEPT = "import importlib.metadata, yaml, " + ", ".join(
    f"tiersim.{m}"
    for m in (
        "core.errors",
        "core.units",
        "core.files",
        "config.presets",
        "config.tier_kinds",
        "config.variants",
        "state.classes",
    )
)


def probe(scenario: str, env: dict[str, str], tmp: str) -> dict:
    """One instrumented run: its dataclasses remade, its pydantic calls counted, its modules."""
    out = str(Path(tmp) / "probe")
    child_cpu_s(["-c", _PROBE, scenario, out], env)
    return json.loads(Path(out + ".probe.json").read_text())


def measured(scenario: str, repeat: int, env: dict[str, str], tmp: str) -> dict[str, float]:
    """Least CPU seconds of the run, its imports, a bare interpreter, the schema's import and
    the part of it a run without pydantic would still import."""
    out = str(Path(tmp) / "run")
    modules, _ = listed_run(scenario, out, env)
    kinds = {
        "run": ["-m", "tiersim", "run", scenario, "--out", out],
        "imports": importer(modules),
        "bare": ["-c", "pass"],
        "schema": ["-c", "import tiersim.config.schema"],
        "kept": ["-c", _KEPT],
    }
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeat):
        for name, argv in kinds.items():
            best[name] = min(best[name], child_cpu_s(argv, env))
    return best


def report(best: dict[str, float], found: dict) -> None:
    ms = {k: 1e3 * v for k, v in best.items()}
    imports, kept = ms["imports"] - ms["bare"], ms["kept"] - ms["bare"]
    schema = ms["schema"] - ms["kept"]  # pydantic, its first model, the 23 models
    print(
        f"run {ms['run']:.0f} ms CPU, its imports {imports:.0f} ms beyond a bare interpreter "
        f"({ms['bare']:.0f} ms): {100 * imports / ms['run']:.0f} % (target <= 40 %)"
    )
    print(
        f"the schema's stage (pydantic, its first model, the 23 models): {schema:.0f} ms, "
        f"beyond {kept:.0f} ms of modules it imports that a run without pydantic still would"
    )
    share_a = (imports - schema) / (ms["run"] - schema)
    print(f"bound A, no schema at all and a free fast path: >= {100 * share_a:.0f} %")
    variants = {k: 1e3 * v for k, v in found["variants_s"].items()}
    cold = 1e3 * found["as_run_s"]
    print(
        f"tiersim's {found['classes']} dataclasses ({found['frozen']} frozen): {cold:.1f} ms as "
        "the run creates them; made again, least of 5 each: "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in variants.items())
    )
    for name, variant, what in (
        ("B", "eq, repr off (still frozen)", "no __eq__, __hash__ or __repr__ generated"),
        ("C", "__init__ alone", "each dataclass an __init__ alone, not frozen"),
    ):
        saved = cold - variants[variant]
        share = (imports - schema - saved) / (ms["run"] - schema - saved)
        print(f"bound {name}, bound A and {what} ({saved:.0f} ms less): >= {100 * share:.0f} %")
    print(
        f"tiersim modules the run imports: {found['modules']}, of which "
        f"{found['schema_importers']} import tiersim.config.schema at module level"
    )
    records = {k: v for k, v in found["calls"].items() if k.startswith("dataclass")}
    classes = sorted({name.split("(")[1].rstrip(")") for name in records})
    print(
        f"tiersim dataclasses the run compares or hashes: {len(classes)} "
        f"({sum(records.values())} calls): " + ", ".join(classes)
    )
    print("the scenario's pydantic models as the run uses them (calls):")
    for name, count in sorted(found["calls"].items(), key=lambda kv: -kv[1]):
        if name not in records:
            print(f"  {count:5d}  {name}")


def main() -> None:
    args, env = arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        found = probe(args.scenario, env, tmp)
        best = measured(args.scenario, args.repeat, env, tmp)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"(least of {args.repeat}; load average {load})")
    report(best, found)


if __name__ == "__main__":
    main()
