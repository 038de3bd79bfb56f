"""The examples each command's `--help` ends with (above its exit codes): a first-time user
reads the help before the docs, and the options alone do not say what a whole command line
looks like. Paths are the repository's shipped scenarios, run from its root, or a user's own
file where the command reads one (tests/test_review_2026_12_08.py parses every line)."""

from __future__ import annotations

import argparse

# by command: (command line, what it does); a line is typed as shown, from the repository root
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "tiersim": [  # the top level's: the README's two commands most people need
        (
            "tiersim inventory scenarios/default.yaml",
            "does it fit? exact bytes per class and tier",
        ),
        (
            "tiersim run scenarios/default.yaml --plot",
            "the step: time, overlap, bytes, wear, checkpoints",
        ),
    ],
    "run": [
        ("tiersim run scenarios/default.yaml --plot", "the step, and results/default/step.png"),
        (
            "tiersim run scenarios/default.yaml"
            " --set hardware.tiers.hbf.write_bandwidth='100 GB/s'",
            "one value changed",
        ),
    ],
    "inventory": [
        (
            "tiersim inventory scenarios/hbf-optimizer-state.yaml --plot memory.png",
            "does it fit? bytes per class and the memory timelines",
        ),
        ("tiersim inventory scenarios/default.yaml --format json", "the same as JSON"),
    ],
    "wear": [
        ("tiersim wear scenarios/hbf-optimizer-state.yaml", "can HBF hold optimizer state?"),
        (
            "tiersim wear scenarios/hbf-optimizer-state.yaml --break-even --plot lifetime.png",
            "what would make it hold",
        ),
    ],
    "sweep": [
        (
            "tiersim sweep scenarios/sweeps/hbf-write-vs-accumulation.yaml --out results/hbf",
            "16 points",
        ),
        (
            "tiersim sweep scenarios/sweeps/hbf-write-vs-accumulation.yaml"
            " --out results/hbf --resume",
            "after a Ctrl-C: the points not yet run",
        ),
    ],
    "validate": [
        ("tiersim validate scenarios/default.yaml", "a scenario"),
        ("tiersim validate scenarios/sweeps/hbf-wear.yaml", "a sweep: every point built"),
    ],
    "check-published": [("tiersim check-published --check", "exit 1 where a target is missed")],
    "measure": [
        ("tiersim measure --model gpt2 --seq-len 256", "GPT-2 on this machine's CPU or GPU"),
        (
            "tiersim measure --model gpt2 --seq-len 256 --attention eager",
            "eager attention: its s x s softmax kept",
        ),
    ],
    "plan": [
        (
            "tiersim plan my-plan.yaml --top 3",
            "my-plan.yaml: a scenario with a section such as "
            "plan: {placement.optimizer: [hbm, dram, hbf]}",
        ),
        ("tiersim plan my-plan.yaml --objective cost", "needs hardware.price_per_gpu_hour"),
    ],
    "calibrate": [
        (
            "tiersim calibrate --path /mnt/nvme --out my-machine.yaml",
            "then hardware: {preset: my-machine.yaml}",
        )
    ],
    "presets": [("tiersim presets --format json", "every preset's figures as JSON")],
    "compare": [
        (
            "tiersim compare scenarios/default.yaml --set placement.optimizer=dram",
            "what moving the optimizer state to DRAM moves",
        ),
        ("tiersim compare results/default results/my-run", "two folders `run` wrote"),
    ],
    "import": [
        (
            "tiersim import ds_config.json --hf-config config.json --gpus 64 --out run.yaml",
            "a DeepSpeed config and the model's config.json",
        )
    ],
}


def examples_text(command: str) -> str:
    """The help's `examples:` paragraph for `command` ('' where it has none): each line
    indented, what it does on the line below it."""
    lines = ["examples:"]
    for line, what in EXAMPLES.get(command, []):
        lines += [f"  {line}", f"      ({what})"]
    return "\n".join(lines) if len(lines) > 1 else ""


class ExampleFormatter(argparse.HelpFormatter):
    """argparse's default formatter, but an epilog's `examples:` paragraph keeps its lines
    (the default joins every line of an epilog into one paragraph); the description and the
    other paragraphs are filled as before."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        paragraphs = text.split("\n\n")
        kept = (p if p.startswith("examples:") else fill(p, width, indent) for p in paragraphs)
        return "\n\n".join(kept)
