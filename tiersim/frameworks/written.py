"""What a writer of a framework's configuration returns, and the figures every writer
derives from a scenario the same way (tiersim.frameworks.emit)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem


@dataclass
class Emitted:
    kind: str
    text: str
    notes: list[Problem] = field(default_factory=list)


def global_batch(s: Scenario) -> int:
    t = s.training
    return t.micro_batch_size * t.grad_accumulation * s.parallel.data


def world(s: Scenario) -> int:
    """The job's GPUs: the mesh's world, context parallelism's ranks included."""
    return Mesh.of(s.parallel).world


def framework_note(s: Scenario, kind: str, framework: str, notes: list[Problem]) -> None:
    given = s.training.framework
    if given != framework:
        why = f"{given or 'none (generic)'}: written for {kind}, whose engine is {framework}'s"
        notes.append(Problem("training.framework", why, "W-EMIT-APPROXIMATE"))
