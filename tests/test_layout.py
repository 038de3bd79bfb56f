"""The package's dependencies run one way (README, Layout): no import cycle, and no package
importing one above it (the state-class table, a leaf, is the one thing the format imports
from `state`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tiersim"
LAYER = {
    "core": 0,
    "config": 1,
    "state": 2,
    "hardware": 2,
    "workload": 3,
    "engine": 4,
    "analysis": 5,
    "report": 6,
    "runner": 7,
    "plan": 8,
    "sweep": 8,
    "groundtruth": 8,
    "cli": 9,
}
LEAVES = {"tiersim.state.classes"}  # imports nothing of tiersim: anyone may use it


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module-level imports of tiersim modules (a function's lazy import is not a dependency
    of the module; `if TYPE_CHECKING:` blocks are left out)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tiersim."):
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                found |= subs or {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("tiersim.")}
        graph[name] = found & modules.keys()
    return graph


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def test_no_package_imports_one_above_it():
    graph = _imports(_modules())
    # the graph is the real one (a reader that found nothing would pass anything)
    assert "tiersim.engine.core" in graph["tiersim.engine.simulate"]
    assert "tiersim.state.classes" in graph["tiersim.config.schema"]
    upward = [
        f"{m} -> {d}"
        for m, deps in graph.items()
        for d in deps
        if d not in LEAVES and None not in (_layer(m), _layer(d)) and _layer(d) > _layer(m)
    ]
    assert upward == []
    assert all(not deps for m, deps in graph.items() if m in LEAVES)


def test_no_import_cycle():
    graph = _imports(_modules())
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for dep in sorted(graph[node]):
            visit(dep, [*path, node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])
