"""The machine a scenario's figures are for, in a phrase for a headline: `dgx-b200 (B200; 64
GPUs, 8 a node)`. report.json names no hardware (DESIGN.md §2's keys), so `run`'s and
`inventory`'s text and `run --plot`'s picture said nothing of it: three runs of one file with
`--set hardware.preset=` dgx-h100, h200-hbf and dgx-b200 printed three headlines alike but for
their figures, into one results folder (docs/review-2026-12-07-e.md)."""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.core.errors import one_line


def machine_phrase(s: Scenario) -> str:
    """The hardware preset (none where the file gives every figure itself, as a run's
    scenario.yaml does), the GPU's name, and the job's GPUs with the node's size."""
    hw = s.hardware
    gpus = Mesh.of(s.parallel).world
    plural = "s" if gpus != 1 else ""
    job = f"{gpus:,} GPU{plural}, {hw.network.gpus_per_node} a node"
    gpu = one_line(hw.gpu.name)
    return f"{one_line(hw.preset)} ({gpu}; {job})" if hw.preset else f"{gpu} ({job})"


def with_machine(text: str, name: str, s: Scenario) -> str:
    """`text` whose first line starts `NAME: ` (a headline) as `NAME on MACHINE: `."""
    head = f"{name}: "
    if not text.startswith(head):
        return text
    return f"{name} on {machine_phrase(s)}: {text[len(head) :]}"
