"""Representative bad inputs and what tiersim says of each: the full prose of these messages
is kept in tests/golden/messages/*.txt (tests/golden/capture_messages.py writes them,
tests/test_message_goldens.py compares), so that the tests elsewhere can check a problem's
code and key path and leave its wording to these files.

Each case is a command run in-process over files written to a temporary folder; its output
has the folder's path replaced by `<tmp>`, so it is the same on every machine. `codes` is
what the case must say, (code, where) for each problem line in order: where is how the line
begins, the source and key path (a file in the folder named `<tmp>/NAME`).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from tiersim.cli import main

GOLDEN = Path(__file__).resolve().parent / "golden" / "messages"

SMALL = "name: small\nmodel: {preset: gpt2}\ntraining: {seq_len: 1024}\n"


@dataclass(frozen=True)
class Case:
    group: str  # the golden file: tests/golden/messages/<group>.txt
    name: str
    args: tuple[str, ...]  # the command; {tmp} is the folder the files are written to
    files: tuple[tuple[str, str], ...]  # (name, text)
    codes: tuple[tuple[str, str], ...]  # (code, where) of each problem line, in order
    exit_code: int = 2


def _scenario(name: str, text: str, codes: tuple[tuple[str, str], ...], *extra: str) -> Case:
    return Case("scenario", name, ("validate", "{tmp}/s.yaml", *extra), (("s.yaml", text),), codes)


CASES = (
    _scenario("file not found", "", (("E-FILE", "<tmp>/missing.yaml"),)),
    _scenario("empty file", "# nothing\n", (("E-YAML", "<tmp>/s.yaml"),)),
    _scenario(
        "yaml syntax error", "name: x\nmodel: {preset: gpt2\n", (("E-YAML", "<tmp>/s.yaml"),)
    ),
    _scenario(
        "unknown key with a suggestion",
        SMALL + "parallel: {tensr: 2}\n",
        (("E-KEY-UNKNOWN", "<tmp>/s.yaml: parallel.tensr"),),
    ),
    _scenario("missing model", "name: x\n", (("E-KEY-MISSING", "<tmp>/s.yaml: model"),)),
    _scenario(
        "a number given as text",
        "name: x\nmodel: {preset: gpt2, layers: many}\n",
        (("E-TYPE", "<tmp>/s.yaml: model.layers"),),
    ),
    _scenario(
        "a count out of range",
        SMALL.replace("1024", "-3"),
        (("E-RANGE", "<tmp>/s.yaml: training.seq_len"),),
    ),
    _scenario(
        "a word not among the choices",
        SMALL.replace("1024}", "1024, recompute: sometimes}"),
        (("E-CHOICE", "<tmp>/s.yaml: training.recompute"),),
    ),
    _scenario(
        "a section written null",
        SMALL + "parallel:\n",
        (("E-NULL", "<tmp>/s.yaml: parallel"),),
    ),
    _scenario(
        "a name that cannot name a folder",
        SMALL.replace("name: small", "name: 'my run/1'"),
        (("E-NAME", "<tmp>/s.yaml: name"),),
    ),
    _scenario(
        "a tier the machine lacks",
        SMALL + "placement: {optimizer: floppy}\n",
        (("E-TIER-UNKNOWN", "<tmp>/s.yaml: placement.optimizer"),),
    ),
    _scenario(
        "an unknown preset",
        "name: x\nmodel: {preset: llama-2-7}\n",
        (("E-PRESET", "<tmp>/s.yaml: model.preset"),),
    ),
    _scenario(
        "heads that do not split over tensor parallelism",
        SMALL + "parallel: {tensor: 5}\n",
        (("E-LAYOUT", "<tmp>/s.yaml: parallel.tensor"),) * 2,  # heads, and kv_heads
    ),
    _scenario(
        "tensor parallelism beyond the KV heads under torchtitan (framework fsdp)",
        "name: x\nmodel: {preset: llama-3-8b}\ntraining: {seq_len: 1024, framework: fsdp}\n"
        "parallel: {tensor: 16}\n",
        (("E-CONFLICT", "<tmp>/s.yaml: parallel.tensor"),),
    ),
    _scenario(
        "a combination Megatron-Core refuses (overlap_expert_comm on plain 1F1B)",
        "name: x\nmodel: {preset: mixtral-8x7b}\ntraining: {seq_len: 1024, framework: megatron}\n"
        "parallel: {data: 2, expert: 2, pipeline: 2, overlap_expert_comm: true}\n",
        (("E-CONFLICT", "<tmp>/s.yaml: parallel.virtual_pipeline"),),
    ),
    _scenario(
        "a --set on a key that does not exist",
        SMALL,
        (("E-KEY-UNKNOWN", "<tmp>/s.yaml: training.seq_lenn"),),
        "--set",
        "training.seq_lenn=2048",
    ),
    Case(
        "sweep",
        "a sweep without axes",
        ("validate", "{tmp}/sweep.yaml"),
        (("s.yaml", SMALL), ("sweep.yaml", "name: sw\nbase: s.yaml\n")),
        (("E-SWEEP", "<tmp>/sweep.yaml"),),
    ),
    Case(
        "sweep",
        "a swept value out of range",
        ("validate", "{tmp}/sweep.yaml"),
        (
            ("s.yaml", SMALL),
            ("sweep.yaml", "name: sw\nbase: s.yaml\ngrid:\n  training.seq_len: [512, -1]\n"),
        ),
        (("E-RANGE", "<tmp>/sweep.yaml: grid.training.seq_len"),),
    ),
    Case(
        "sweep",
        "an unknown key in a sweep file",
        ("validate", "{tmp}/sweep.yaml"),
        (
            ("s.yaml", SMALL),
            ("sweep.yaml", "name: sw\nbase: s.yaml\ngird: {}\ngrid: {training.seq_len: [512]}\n"),
        ),
        (("E-KEY-UNKNOWN", "<tmp>/sweep.yaml: gird"),),
    ),
    Case(
        "command-line",
        "an output folder that is a file",
        ("run", "{tmp}/s.yaml", "--out", "{tmp}/s.yaml"),
        (("s.yaml", SMALL + "hardware: {preset: h200-hbf}\n"),),  # the machine named: no note
        (("E-RESULTS", "--out: <tmp>/s.yaml"),),
    ),
    Case(
        "command-line",
        "compare without a second side",
        ("compare", "{tmp}/s.yaml"),
        (("s.yaml", SMALL),),
        (("E-RESULTS", "compare"),),
    ),
    Case(
        "command-line",
        "measure a scenario whose model is a parameter count",
        ("measure", "--scenario", "{tmp}/s.yaml"),
        (("s.yaml", "name: g\nmodel: {parameters: 1000000, layers: 2}\n"),),
        (("E-MEASURE", "<tmp>/s.yaml: model.parameters"),),
    ),
)


def run(case: Case, folder: Path) -> tuple[int, str]:
    """(exit code, stderr with the folder's path as `<tmp>`) of the case, run in `folder`."""
    for name, text in case.files:
        (folder / name).write_text(text)
    args = [a.replace("{tmp}", str(folder)) for a in case.args]
    if case.name == "file not found":
        args[1] = str(folder / "missing.yaml")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue().replace(f"{folder}/", "<tmp>/").replace(str(folder), "<tmp>")


def section(case: Case, stderr: str) -> str:
    """The case's part of its golden file."""
    return f"## {case.name}\n$ tiersim {' '.join(case.args)}\n{stderr.rstrip()}\n"


def groups() -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {}
    for case in CASES:
        out.setdefault(case.group, []).append(case)
    return out
