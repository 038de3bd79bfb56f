"""tiersim as a library, for a notebook: load or build a scenario, override it, simulate it,
sweep it, plan it, read other frameworks' configurations and write plans back; results as
pyarrow tables (`.to_pandas()` where pandas is installed) and matplotlib figures.

    from tiersim import api

    s = api.load("scenarios/default.yaml", {"parallel.data": 16})
    run = api.run(s)                      # run.report: report.json's content
    run.table()                           # one row: the headline figures
    api.sweep(s, {"training.micro_batch_size": [1, 2, 4]})   # one row a point
    api.plan("scenarios/default.yaml", top=3).table()

Every function raises `tiersim.InputError` for bad input (the CLI's exit 2) and
`tiersim.InfeasibleError` for a scenario that cannot run (exit 3); docs/api.md walks
through it. The CLI's commands call these functions (tests/test_cli_thin.py), so a figure
here is the figure the CLI prints; tiersim/api_commands.py holds the rest of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.api_commands import (
    Wear,
    check,
    compare,
    flash_span,
    host_memory,
    inventory,
    model_facts,
    notes,
    wear,
)
from tiersim.api_inputs import (
    as_loaded,
    axis_values,
    gpus_given,
    override_texts,
    plan_asked,
    scenario_mapping,
)
from tiersim.config.load import API_OVERRIDES, SET_FLAGS, Loaded, Origin, load_scenario
from tiersim.config.load import build as build_loaded
from tiersim.config.yamlfile import read_yaml_and_text
from tiersim.core.records import record
from tiersim.engine.results import StepResult

if TYPE_CHECKING:  # the engine loads when a run is asked for
    from tiersim.runner import Run as Lifecycle

Overrides = Mapping[str, Any] | Sequence[str] | None

__all__ = [
    "API_OVERRIDES",
    "SET_FLAGS",
    "Planned",
    "Run",
    "Wear",
    "build",
    "check",
    "compare",
    "emit",
    "flash_span",
    "host_memory",
    "import_configs",
    "imported",
    "inventory",
    "inventory_table",
    "load",
    "model_facts",
    "notes",
    "override",
    "plan",
    "run",
    "sweep",
    "sweep_figure",
    "wear",
]


def _texts(overrides: Overrides) -> list[str]:
    """`{"parallel.data": 16}` or `["parallel.data=16"]` as --set texts (a TypeError else)."""
    return override_texts(overrides)


def load(path: str | Path, overrides: Overrides = None, origin: Origin = API_OVERRIDES) -> Loaded:
    """A scenario file, validated, with `overrides` (key path -> value, or PATH=VALUE
    texts as --set takes them) applied. A problem an override causes says "(from the
    override PATH=VALUE)"; `origin=SET_FLAGS` words it as the CLI's "(from --set ...)"."""
    return load_scenario(path, _texts(overrides), origin)


def build(
    mapping: Mapping[str, Any], overrides: Overrides = None, base_dir: str | Path = "."
) -> Loaded:
    """A scenario from a mapping (as a YAML file would give it); relative file names in it
    (a preset file, an hf_config) are read from `base_dir`."""
    raw = scenario_mapping(mapping)
    return build_loaded(raw, Path(base_dir), "<api>", _texts(overrides), API_OVERRIDES)


def override(loaded: Loaded, overrides: Overrides) -> Loaded:
    """`loaded` with more overrides (a later one of the same key wins)."""
    more = [*loaded.overrides, *_texts(overrides)]
    source = Path(loaded.source)
    if source.is_file():  # read again: its relative file names are the file's folder's
        return load_scenario(source, more, API_OVERRIDES)
    return build_loaded(
        loaded.resolved, Path.cwd(), loaded.source, _texts(overrides), API_OVERRIDES
    )


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {}
    for row in rows:
        for key in row:
            columns.setdefault(key, [])
    for row in rows:
        for key, values in columns.items():
            values.append(row.get(key))
    for key, values in columns.items():  # a column of mixed kinds is shown as text
        kinds = {type(v) for v in values if v is not None}
        if len(kinds - {int, float}) > 0 and len(kinds) > 1:
            columns[key] = [None if v is None else str(v) for v in values]
    return pa.table(columns)


@record
class Run:
    """One simulated scenario: its report (report.json's content) and the step's result, read
    off its run (`lifecycle`: tiersim.runner.Run, simulated once; the picture's full step is
    its one variant, simulated where first drawn and kept)."""

    loaded: Loaded
    lifecycle: Lifecycle

    @property
    def report(self) -> dict[str, Any]:
        return self.lifecycle.report

    @property
    def result(self) -> StepResult:
        return self.lifecycle.result

    def table(self) -> Any:
        """One row: the headline figures (the columns a sweep writes), units in the names."""
        from tiersim.sweep.outputs import headline

        return _table([{"scenario": self.loaded.scenario.name, **headline(self.report)}])

    def tiers(self) -> Any:
        """One row a tier: capacity, resident and peak bytes, whether it fits."""
        rows = []
        for name, tier in self.report["tiers"].items():
            keep = ("capacity_bytes", "resident_bytes", "peak_bytes", "fits")
            rows.append({"tier": name, **{k: tier.get(k) for k in keep}})
        return _table(rows)

    def links(self) -> Any:
        """One row a link: bytes moved, busy seconds and utilization over the step."""
        rows = [{"link": name, **dict(link)} for name, link in self.report["links"].items()]
        return _table(
            [{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in rows]
        )

    def figure(self) -> Any:
        """The step drawn as `tiersim run --plot` draws it (a matplotlib Figure)."""
        from tiersim.report.machine import machine_phrase
        from tiersim.report.plot import step_figure

        machine = machine_phrase(self.loaded.scenario)
        return step_figure(self.report, self.lifecycle.full_trace, machine=machine)


def run(loaded: Loaded | str | Path, record: bool = False) -> Run:
    """Simulate `loaded` (checked as `tiersim run` checks it; a scenario file's path is
    loaded) and report it; `record`: keep the step's trace (`run.result.trace`, as
    `tiersim run --trace` writes it)."""
    from tiersim.runner import Run as Lifecycle

    loaded = as_loaded(loaded, "api.run")
    lifecycle = Lifecycle.of(loaded, record=record)
    lifecycle.report  # noqa: B018  simulated and reported now: its errors raised here
    return Run(loaded, lifecycle)


def inventory_table(loaded: Loaded) -> Any:
    """One row a state class: its bytes per GPU and its home tier (no simulation); after
    `gradients`, a `gradients (GPU)` row where the GPU keeps the whole gradients beside the
    host's partition (DeepSpeed ZeRO-1 with the CPU optimizer), as `tiersim inventory` has."""
    from tiersim.report.inventory_note import GPU_GRADIENTS

    inv = inventory(loaded)
    homes = loaded.scenario.placement.model_dump()
    rows = [
        {"class": cls, "bytes_per_gpu": inv.per_gpu[cls], "home": homes.get(cls, "hbm")}
        for cls in ("weights", "gradients", "master", "optimizer", "activations", "workspace")
    ]
    if inv.per_gpu.gpu_gradients:
        gpu = loaded.scenario.hardware.gpu.memory
        row = {"class": GPU_GRADIENTS, "bytes_per_gpu": inv.per_gpu.gpu_gradients, "home": gpu}
        rows.insert(2, row)
    return _table(rows)


def _points(grid: Mapping[str, Iterable[Any]]) -> list[dict[str, Any]]:
    paths = list(grid)
    values = [axis_values(p, grid[p]) for p in paths]
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*values)]


def sweep(loaded: Loaded, grid: Mapping[str, Iterable[Any]], workers: int = 1) -> Any:
    """Every combination of `grid` (key path -> values) over `loaded`, simulated (on
    `workers` processes): one row a point, its swept values, status and error, then the
    headline figures. A point that is invalid or cannot run is a row with its status, as in
    `tiersim sweep`."""
    from tiersim.config.overrides import apply_overrides
    from tiersim.sweep.worker import PointTask, run_point

    source = Path(loaded.source)
    if source.is_file():
        raw, _ = read_yaml_and_text(source, str(source))
        base_dir = str(source.parent)
    else:
        raw, base_dir = loaded.resolved, str(Path.cwd())
    raw = apply_overrides(raw, list(loaded.overrides), loaded.source)
    points = _points(grid)
    tasks = [
        PointTask(apply_overrides(raw, _texts(p), loaded.source), base_dir, loaded.source, values=p)
        for p in points
    ]
    results = _run_points(tasks, workers, run_point)
    rows = []
    for i, (point, result) in enumerate(zip(points, results, strict=True)):
        row = {"point": i, **point, "status": result.status, "error": result.error}
        rows.append(row | result.outputs)
    return _table(rows)


def _run_points(tasks: list[Any], workers: int, fn: Any) -> list[Any]:
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    from tiersim.sweep.execute import run_on_pool, stream

    def body(pool: Any) -> list[Any]:
        out: list[Any] = [None] * len(tasks)
        for batch in stream(pool, fn, tasks):
            for position, outcome in batch:
                if isinstance(outcome, BaseException):
                    raise outcome
                out[position] = outcome
        return out

    from concurrent.futures.process import BrokenProcessPool

    try:
        return run_on_pool("local", min(workers, len(tasks)), None, None, body)
    except BrokenProcessPool as exc:
        raise BrokenProcessPool(f"{exc} {UNGUARDED}") from exc


# Python's worker processes import the calling script again (forkserver, spawn): a script
# that sweeps at its top level sweeps again in each, and the pool breaks
UNGUARDED = (
    "(a script that calls tiersim.api.sweep or plan with workers > 1 at its top level must "
    'call it under `if __name__ == "__main__":`: each worker process imports the script)'
)


def sweep_figure(table: Any, x: str, y: str) -> Any:
    """`y` against `x` from a sweep's table (the points that ran), as a matplotlib Figure."""
    from matplotlib.figure import Figure

    rows = [r for r in table.to_pylist() if r.get("status") == "ok" and r.get(y) is not None]
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([str(r[x]) for r in rows], [r[y] for r in rows], marker="o")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    return fig


@record
class Planned:
    """`tiersim plan`'s answer: `report` is its JSON, `table()` one row a plan."""

    report: dict[str, Any]

    def table(self) -> Any:
        rows = []
        for p in self.report["plans"]:
            keep = ("rank", "score", "step_time_s", "tokens_per_s", "goodput_tokens_per_s")
            rows.append({k: p.get(k) for k in keep} | {"overrides": " ".join(p["overrides"])})
        return _table(rows)

    def break_even(
        self, wrap: Callable[[Callable], Callable] | None = None
    ) -> dict[str, Any] | None:
        """`tiersim plan --break-even`: where a plan holds optimizer state on HBF, the
        figures at which it stops paying (None where no plan asks the question). `wrap`, given,
        wraps the simulate function its ~30 simulations call (the CLI counts them)."""
        from tiersim.plan.breakeven import hbf_break_even

        question = self.report["hbf_optimizer"]
        if question is None:
            return None
        base = tuple(self.report["base_overrides"])
        return hbf_break_even(Path(self.report["scenario"]), question, base, wrap)

    def best(self) -> Loaded | None:
        """The best plan as a scenario (None where no plan fits)."""
        from tiersim.plan.rank import rerun_overrides

        if not self.report["plans"]:
            return None
        own = tuple(self.report["plans"][0]["overrides"])
        chosen = rerun_overrides(tuple(self.report["base_overrides"]), own)
        return load_scenario(self.report["scenario"], chosen)


def plan(
    path: str | Path,
    overrides: Overrides = None,
    objective: str = "tokens_per_s",
    top: int = 5,
    workers: int | None = None,
    time_limit_s: float | None = 600.0,
    executor: str = "local",
    scheduler: str | None = None,
) -> Planned:
    """`tiersim plan` of the scenario file at `path` (its plan: section, or the default
    space), progress on standard error; `executor` "dask" (at `scheduler`, else a local
    cluster) spreads the candidates as `tiersim plan --executor` does."""
    from tiersim.plan.report import plan_report
    from tiersim.plan.run import PlanOptions
    from tiersim.plan.run import plan as run_plan
    from tiersim.sweep.execute import SweepAborted

    plan_asked(objective, top)
    options = PlanOptions(objective, top, workers, executor, scheduler, time_limit_s)
    try:
        outcome = run_plan(Path(path), options, tuple(_texts(overrides)))
    except SweepAborted as exc:
        if "BrokenProcessPool" not in str(exc):
            raise
        raise SweepAborted(f"{exc} {UNGUARDED}") from exc
    return Planned(plan_report(outcome, objective, top))


def import_configs(
    paths: Sequence[str | Path] | str | Path,
    kind: str | None = None,
    hf_config: str | None = None,
    hardware: str = "dgx-h100",
    gpus: int | None = None,
    overrides: Overrides = None,
) -> Loaded:
    """`tiersim import`: the scenario DeepSpeed / Megatron-LM / torchtitan configs describe
    (its notes and YAML text: `api.imported`)."""
    return imported(paths, kind, hf_config, hardware, gpus, overrides).loaded


def imported(
    paths: Sequence[str | Path] | str | Path,
    kind: str | None = None,
    hf_config: str | None = None,
    hardware: str = "dgx-h100",
    gpus: int | None = None,
    overrides: Overrides = None,
    name: str | None = None,
    recipe: str | None = None,
) -> Any:
    """`import_configs`' whole answer (`tiersim import`'s): `.loaded`, `.note_lines()` (every
    key not mapped) and `.yaml_text()` (the scenario file); `name` the scenario's, `recipe`
    a Megatron-Bridge recipe's function."""
    from tiersim.frameworks.assemble import ImportOptions
    from tiersim.frameworks.assemble import import_configs as assemble

    if isinstance(paths, str | Path):
        paths = [paths]
    texts = tuple(_texts(overrides))
    options = ImportOptions(kind, hf_config, hardware, gpus_given(gpus), name, texts, recipe)
    return assemble([Path(p) for p in paths], options)


def emit(loaded: Loaded, kind: str) -> str:
    """`loaded`'s scenario as `kind`'s configuration text (deepspeed, megatron, torchtitan);
    what it cannot say: `tiersim.frameworks.emit.emit(...).notes`."""
    from tiersim.frameworks.emit import emit as write

    return write(loaded.scenario, kind).text
