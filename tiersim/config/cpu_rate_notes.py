"""A note for a CPU optimizer rate the step does not use: under `training.framework:
deepspeed` the CPU update runs DeepSpeed's path in parts, its CPU-Adam kernel at
`cpu.adam_kernel_rate` (tiersim.workload.cpu_optimizer.kernel_rate), so where the hardware
gives that rate, `cpu.optimizer_rate` times nothing: `zero-offload-10b-dgx2` steps in 60.828 s
at 0.1 or 10 Gparam/s of it. Noted where the scenario changes it from its preset's (the
presets set both, so an unchanged one is no one's choice)."""

from __future__ import annotations

import math

from tiersim.config.hardware_schema import Cpu
from tiersim.config.presets import preset_names, read_preset
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.core.units import Kind, parse

WHERE = "hardware.cpu.optimizer_rate"


def _preset_rate(preset: str | None) -> float | None:
    """The optimizer rate the scenario's hardware preset gives (the schema's default where it
    gives none, or where there is no preset); None: a preset file, not known here."""
    if preset is None:
        return Cpu().optimizer_rate
    if preset not in preset_names("hardware"):
        return None
    given = read_preset("hardware", preset).get("cpu", {}).get("optimizer_rate")
    return Cpu().optimizer_rate if given is None else parse(given, Kind.PARAM_RATE)


def cpu_rate_notes(s: Scenario) -> list[Problem]:
    cpu = s.hardware.cpu
    on_cpu = s.placement.optimizer_compute == "cpu"
    if s.training.framework != "deepspeed" or not on_cpu or cpu.adam_kernel_rate is None:
        return []
    preset = _preset_rate(s.hardware.preset)
    if preset is None or math.isclose(cpu.optimizer_rate, preset, rel_tol=1e-9):
        return []
    why = (
        f"{cpu.optimizer_rate / 1e9:g} Gparam/s has no effect: under training.framework "
        "deepspeed the CPU update is DeepSpeed's path in parts, its CPU-Adam kernel at "
        f"hardware.cpu.adam_kernel_rate ({cpu.adam_kernel_rate / 1e9:g} Gparam/s; docs/science.md, "
        '"CPU optimizer"): set that rate to change the update'
    )
    return [Problem(WHERE, why, "W-NO-EFFECT")]
