"""Under `training.framework: deepspeed` the CPU update's kernel runs at
`cpu.adam_kernel_rate`: `--set hardware.cpu.optimizer_rate=...` on zero-offload-10b-dgx2
left its step at 60.828 s, whatever the rate, without a word. Now a note says so."""

from __future__ import annotations

from pathlib import Path

from tiersim import api

ROOT = Path(__file__).resolve().parents[1]
ZERO_OFFLOAD = ROOT / "scenarios/zero-offload-10b-dgx2.yaml"  # deepspeed, CPU Adam, dgx2


def rate_notes(path: Path, **overrides: object) -> list:
    notes = api.notes(api.load(path, overrides))
    return [n for n in notes if n.path == "hardware.cpu.optimizer_rate"]


def test_a_changed_rate_deepspeed_does_not_use_is_noted():
    (note,) = rate_notes(ZERO_OFFLOAD, **{"hardware.cpu.optimizer_rate": "0.1 Gparam/s"})
    assert note.code == "W-NO-EFFECT"
    # the dgx2 preset's CPU-Adam kernel rate, 0.230 Gparam/s
    assert note.message.startswith("0.1 Gparam/s has no effect: under training.framework")
    assert "hardware.cpu.adam_kernel_rate (0.23 Gparam/s" in note.message


def test_the_same_step_at_either_rate():
    # what the note says, checked: the step is the kernel rate's
    times = []
    for rate in ("0.1 Gparam/s", "10 Gparam/s"):
        s = api.load(ZERO_OFFLOAD, {"hardware.cpu.optimizer_rate": rate})
        times.append(api.run(s).report["step"]["time_s"])
    assert times[0] == times[1]


def test_no_note_where_the_rate_is_used_or_left_as_the_preset_gives_it():
    assert rate_notes(ZERO_OFFLOAD) == []  # the preset's own
    generic = {"hardware.cpu.optimizer_rate": "0.1 Gparam/s", "training.framework": None}
    assert rate_notes(ZERO_OFFLOAD, **generic) == []  # no framework: the rate times the update
    # every shipped scenario: tests/test_kernel_notes.py, with the peak notes
