"""Reporting reads the engine's result records and never reaches into its internals
(DESIGN.md section 3): every import in tiersim/report of a tiersim.engine module, at module
level, inside a function or under `if TYPE_CHECKING:`, is one of the result-type modules."""

from __future__ import annotations

import ast
from pathlib import Path

REPORT = Path(__file__).resolve().parent.parent / "tiersim" / "report"
RESULT_TYPES = {
    "tiersim.engine.results",  # StepResult, TierStats, LinkStats, CheckpointRun
    "tiersim.engine.offload_results",  # what a framework's offload engine did (OffloadFacts)
    # the result types' figure map: each field's rule, declared beside it (engine/results.py)
    "tiersim.engine.figures",
    # the records a trace recorder is told of (engine.core.Recorder: op(op, start, end)), as
    # desmod's tracers read what the model emits: the trace is built from them
    "tiersim.engine.ops",
}


def engine_imports(source: str) -> set[str]:
    """Every tiersim.engine module `source` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tiersim.engine":  # `from tiersim.engine import results`
                found |= {f"tiersim.engine.{a.name}" for a in node.names}
            else:
                found.add(node.module)
    return {m for m in found if m == "tiersim.engine" or m.startswith("tiersim.engine.")}


def test_the_reader_sees_imports_inside_functions_and_type_checking_blocks():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from tiersim.engine.phases import Context\n"
        "def f():\n"
        "    from tiersim.engine import simulate\n"
        "    import tiersim.engine.durable\n"
        "from tiersim.state.model import build_model\n"
    )
    assert engine_imports(source) == {
        "tiersim.engine.phases",
        "tiersim.engine.simulate",
        "tiersim.engine.durable",
    }


def test_report_imports_only_the_engine_s_result_types():
    files = sorted(REPORT.glob("*.py"))
    assert len(files) > 20  # the real package, not an empty folder
    imported = {f.name: engine_imports(f.read_text()) for f in files}
    # what the report does read is seen (a reader that found nothing would pass anything)
    assert "tiersim.engine.results" in imported["json_report.py"]
    beyond = {name: sorted(mods - RESULT_TYPES) for name, mods in imported.items()}
    assert {name: mods for name, mods in beyond.items() if mods} == {}
