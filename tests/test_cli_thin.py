"""The CLI is a thin layer over tiersim.api (issue 37): a command parses its arguments,
calls the API, prints or writes what comes back and picks its exit code. No command module
reaches past the API into the simulator (engine, state, workload, hardware, analysis, the
runner, the rulebook) itself; the exceptions are listed here with why."""

from __future__ import annotations

import ast
from pathlib import Path

COMMANDS = Path(__file__).resolve().parent.parent / "tiersim" / "cli" / "commands"
BEYOND_THE_API = (
    "tiersim.engine",
    "tiersim.state",
    "tiersim.workload",
    "tiersim.hardware",
    "tiersim.analysis",
    "tiersim.runner",
    "tiersim.rulebook",
)
# module -> the modules beyond the API it may import, and why
EXCEPTIONS = {
    # the ground-truth tools: they check the simulator against PyTorch measurements and
    # published runs, so they compare its internals (not a user's job through the API)
    "measure.py": {
        "tiersim.state.activations": "the accounting a measurement is set against",
        "tiersim.state.optimizers": "what an optimizer's measurement reports apart",
    },
    "measure_fsdp.py": {"tiersim.state.optimizers": "what the FSDP2 step's title calls it"},
    "check_published.py": {"tiersim.runner": "simulates each published reference's scenario"},
}


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Every module imported, at the top or inside a function, except under
    `if TYPE_CHECKING:` (annotations only: nothing is loaded or called)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            skip |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return out


def _beyond(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in BEYOND_THE_API)


def test_commands_reach_the_simulator_only_through_the_api():
    found = {}
    for path in sorted(COMMANDS.glob("*.py")):
        reached = {m for m in _runtime_imports(ast.parse(path.read_text())) if _beyond(m)}
        allowed = set(EXCEPTIONS.get(path.name, {}))
        if reached - allowed:
            found[path.name] = sorted(reached - allowed)
    assert found == {}, f"commands importing past tiersim.api: {found}"


def test_the_exceptions_are_still_needed():
    # an exception no longer used is removed, so the list says what is true
    for name, allowed in EXCEPTIONS.items():
        reached = set(_runtime_imports(ast.parse((COMMANDS / name).read_text())))
        assert set(allowed) <= reached, name


def test_the_commands_that_simulate_call_the_api():
    for name in (
        "run",
        "compare",
        "wear",
        "inventory",
        "validate",
        "presets",
        "plan",
        "import_config",
        "common",
    ):
        modules = _runtime_imports(ast.parse((COMMANDS / f"{name}.py").read_text()))
        assert "tiersim.api" in modules, name


def test_the_check_finds_an_import_past_the_api(tmp_path):
    # the check itself can fail: a function-level import of the engine is found, a
    # TYPE_CHECKING one is not
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tiersim.analysis.wear import Assessment\n"
        "def run():\n    from tiersim.engine.sim import simulate\n"
    )
    reached = [m for m in _runtime_imports(ast.parse(code)) if _beyond(m)]
    assert reached == ["tiersim.engine.sim"]
