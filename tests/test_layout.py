"""The package's dependencies run one way (docs/extending.md): no import cycle, and no package
importing one above it (the state-class table, a leaf, is the one thing the format imports
from `state`)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
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
    "frameworks": 8,
    "api": 9,
    "cli": 9,
}
# import nothing of tiersim but one another (classes the optimizer registry, the registry
# its optimizers' modules, Muon's its sharded Newton-Schulz, that the CPU GEMM's scratchpad
# rule): anyone may
LEAVES = {
    "tiersim.state.classes",
    "tiersim.state.optimizers",
    "tiersim.state.optimizer_base",
    "tiersim.state.adamw8bit",
    "tiersim.state.muon",
    "tiersim.state.muon_sharded",
    "tiersim.state.onednn_brgemm",
    "tiersim.state.torchao_adamw8bit",
    "tiersim.state.single_tensor_adam",
}


@functools.cache
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A file's text and syntax tree, read once for the tests that walk it: four walk the
    package's modules (parsed once instead of four times, their CPU 10.3 -> 5.3 s at load
    average 18-24 on 2 cores). Nothing walking a tree changes it."""
    text = path.read_text()
    return text, ast.parse(text)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in `body` and in the statement lists under it (a function's, a class's,
    a branch's, a handler's, a case's), in order: where an import or a `def` can stand, as the
    grammar has them only in statement lists. ast.walk visits every expression too: the
    import and size checks walked 1.5 s of them (the package, its tests and benchmarks), 0.1 s
    this way."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if inner:
                yield from _statements(inner)
        for part in [*getattr(node, "handlers", ()), *getattr(node, "cases", ())]:
            yield from _statements(part.body)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every import of a tiersim module, wherever it stands: at module level, inside a function
    (a lazy import still needs the other module, only later) or under `if TYPE_CHECKING:` (a
    type the module's signatures name). The CLI imports its commands lazily, for start-up
    speed: those count too, so they may stay lazy as long as they form no cycle."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in _statements(_parsed(path)[1].body):
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
    assert all(not deps - LEAVES for m, deps in graph.items() if m in LEAVES)
    assert not graph["tiersim.state.optimizers"] - LEAVES
    assert not graph["tiersim.state.muon_sharded"] - {"tiersim.state.onednn_brgemm"}
    assert not graph["tiersim.state.onednn_brgemm"]
    assert not graph["tiersim.state.torchao_adamw8bit"]


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import cycle met in a depth-first walk, as 'a -> b -> a'."""
    done: set[str] = set()
    found: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(" -> ".join([*path[path.index(node) :], node]))
            return
        if node in done:
            return
        for dep in sorted(graph[node]):
            visit(dep, [*path, node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_a_cycle_behind_a_lazy_or_type_only_import_is_seen(tmp_path):
    package = tmp_path / "tiersim"
    package.mkdir()
    (package / "a.py").write_text("from tiersim.b import x\n")
    (package / "b.py").write_text("def f():\n    from tiersim.a import y\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from tiersim.d import D\n"
    )
    (package / "d.py").write_text("import tiersim.c\n")
    graph = _imports(_modules(package))
    assert _cycles(graph) == [
        "tiersim.a -> tiersim.b -> tiersim.a",
        "tiersim.c -> tiersim.d -> tiersim.c",
    ]


def test_no_import_cycle():
    graph = _imports(_modules())
    # the graph holds the lazy and the type-only imports: a CLI command's lazy import (the
    # measure command imports groundtruth inside its handler) and a TYPE_CHECKING import (the
    # workload's data-parallel comms name state.resolved's type)
    assert "tiersim.groundtruth.measure" in graph["tiersim.cli.commands.measure"]
    assert "tiersim.state.resolved" in graph["tiersim.workload.data_parallel"]
    assert _cycles(graph) == []


MODULE_LINES = 400  # STYLE.md: modules under ~400 lines
FUNCTION_LINES = 50  # and functions under ~50, decorators included


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for name, path in _modules().items():
        text, tree = _parsed(path)
        modules[name] = len(text.splitlines())
        for node in _statements(tree.body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                functions[f"{name}.{node.name}:{start}"] = node.end_lineno - start + 1
    return modules, functions


def test_no_module_or_function_over_the_size_limits():
    modules, functions = _sizes()
    # the count is the real one: the engine's core module and its run function were read
    assert modules["tiersim.engine.core"] > 100
    assert any(f.startswith("tiersim.engine.simulate.simulate:") for f in functions)
    assert {m: n for m, n in modules.items() if n > MODULE_LINES} == {}
    assert {f: n for f, n in functions.items() if n > FUNCTION_LINES} == {}


def _private_imports(root: Path) -> list[str]:
    """`from tiersim.x import _name` anywhere under `root`: a private name used across modules."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in _statements(_parsed(path)[1].body):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tiersim"):
                names = [a.name for a in node.names if a.name.startswith("_")]
                found += [f"{path.name}: {node.module}.{n}" for n in names if n[:2] != "__"]
    return found


def test_no_private_name_imported_across_modules(tmp_path):
    # the check sees one where there is one
    (tmp_path / "probe.py").write_text("from tiersim.workload.pipeline import _hidden\n")
    assert _private_imports(tmp_path) == ["probe.py: tiersim.workload.pipeline._hidden"]
    roots = [PACKAGE, PACKAGE.parent / "tests", PACKAGE.parent / "benchmarks"]
    assert [hit for root in roots for hit in _private_imports(root)] == []


# the optimizer registry and the modules of its optimizers' classes: the one place an
# optimizer's name is compared (issue 38: everything else asks the object)
REGISTRY_MODULES = {
    "tiersim.state.optimizers",
    "tiersim.state.optimizer_base",
    "tiersim.state.adamw8bit",
    "tiersim.state.muon",
}


def _named(node: ast.expr | None, names: frozenset[str]) -> bool:
    """A string literal that is an optimizer's name, or a tuple / list / set of them."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_named(e, names) for e in node.elts)
    return False


def _name_decisions(tree: ast.Module, names: frozenset[str]) -> list[int]:
    """The lines where a module decides by an optimizer's name spelled as a literal: a
    comparison with one on either side (`x == "muon"`, `"adam" != x`, `x in ("adam",
    "adamw")`, or `x in NAMED` where the module binds NAMED to such a tuple) and a dict keyed
    by one (`{"adamw": "AdamW"}.get(x)`)."""
    bound = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and _named(node.value, names)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def named(side: ast.expr) -> bool:
        return _named(side, names) or (isinstance(side, ast.Name) and side.id in bound)

    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Compare) and any(map(named, [node.left, *node.comparators])))
        or (isinstance(node, ast.Dict) and any(_named(k, names) for k in node.keys))
    )


def test_an_optimizers_name_decides_nothing_outside_the_registry():
    from tiersim.state.optimizers import NAMES

    names = frozenset(NAMES)
    probe = ast.parse(
        'a = x == "muon"\nb = "adamw8bit" != y\nc = z not in ("sgd", "other")\n'
        'd = z in ["lion"]\nRATED = ("adam", "adamw")\nf = x in RATED\n'
        'g = {"adamw": "AdamW"}.get(x)\nh = x == "muonx"\ni = x < 3\nj = {"muon": 1}["muonx"]\n'
        'k = {"optimizer": "adamw"}\n'
    )
    # not "muonx", a number, a name as a value, nor RATED's assignment
    assert _name_decisions(probe, names) == [1, 2, 3, 4, 6, 7, 10]
    found = [
        f"{name}:{line}"
        for name, path in _modules().items()
        if name not in REGISTRY_MODULES
        for line in _name_decisions(_parsed(path)[1], names)
    ]
    assert found == []
