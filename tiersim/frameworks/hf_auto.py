"""transformers' DeepSpeed integration's `"auto"` values in a DeepSpeed JSON config: what the
HuggingFace Trainer fills in before DeepSpeed reads the file, and what `tiersim import` takes
for each (transformers 5.25.0, transformers/integrations/deepspeed.py,
`HfTrainerDeepSpeedConfig`; `fill_match` / `fill_only` replace a value that is exactly the
string "auto", `is_auto`: `val == "auto"`).

- `trainer_config_process` fills from TrainingArguments: `train_micro_batch_size_per_gpu`
  (per_device_train_batch_size), `gradient_accumulation_steps`, `train_batch_size` (world
  size x the two), `fp16.enabled` (fp16 | fp16_full_eval), `bf16.enabled` (bf16 |
  bf16_full_eval), and hyperparameters tiersim does not model (gradient_clipping,
  optimizer.params.*, scheduler.params.*: noted as any unmapped key is). No file given to
  `import` holds the Trainer's arguments, so each is taken from the rest of the input where
  it follows from it (DeepSpeed's batch rule, the other precision section), else tiersim's
  default, with a note naming the argument (`--set` gives it).
- `trainer_config_finalize` fills from the model's hidden size h: `zero_optimization.
  reduce_bucket_size` = h x h, and under ZeRO-3 only `stage3_prefetch_bucket_size` =
  int(0.9 x h x h) and `stage3_param_persistence_threshold` = 10 x h. The model is in the
  input (`--hf-config`, `--set model...`), so `import` fills them as the Trainer would, with
  a note; a value the user `--set` wins. Under another stage the Trainer leaves the two
  stage3 keys "auto" and DeepSpeed's config (an integer field) refuses them: refused here.

Any other key a reader needs ("auto" where a stage, a device or a size is read) is refused as
DeepSpeed would refuse it, exit 2 with its key path and the keys the Trainer fills.
"""

from __future__ import annotations

from typing import Any

from tiersim.config.deepspeed import alias_path
from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import ValueProblem

AUTO = "auto"
# TrainingArguments each key is filled from (trainer_config_process)
TRAINER = {
    "train_micro_batch_size_per_gpu": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "train_batch_size": "world size x per_device_train_batch_size x gradient_accumulation_steps",
    "fp16.enabled": "fp16 | fp16_full_eval",
    "bf16.enabled": "bf16 | bf16_full_eval",
}
# zero_optimization keys filled from the hidden size h (trainer_config_finalize): the scenario
# key, h -> value, the rule as the note says it, whether only under ZeRO-3
HIDDEN = {
    "zero_optimization.reduce_bucket_size": (
        "training.offload.reduce_bucket_size",
        lambda h: h * h,
        "hidden_size x hidden_size",
        False,
    ),
    "zero_optimization.stage3_prefetch_bucket_size": (
        "training.offload.prefetch_bucket_size",
        lambda h: int(0.9 * h * h),
        "int(0.9 x hidden_size x hidden_size)",
        True,
    ),
    "zero_optimization.stage3_param_persistence_threshold": (
        "training.deepspeed.stage3_param_persistence_threshold",
        lambda h: 10 * h,
        "10 x hidden_size",
        True,
    ),
}
FILLED = ", ".join([*TRAINER, *HIDDEN])


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def refuse(key: str) -> ValueProblem:
    """ "auto" where the Trainer fills nothing: DeepSpeed would read the string itself."""
    why = (
        f"is 'auto', which transformers' Trainer fills only in {FILLED}; DeepSpeed reads it "
        "as given here (expected a value)"
    )
    return ValueProblem(key, why)


def trainer_value(out: Mapped, key: str) -> None:
    """A key the Trainer fills from its arguments: noted, left to the rest of the input."""
    arg = TRAINER[key]
    if key.endswith(".enabled"):
        out.facts.setdefault("precision_auto", []).append(key)
        return  # said once the other section is read (precision_note)
    taken = {
        "train_batch_size": "derived here as DeepSpeed does, micro-batch x accumulation x "
        "data-parallel size",
        "train_micro_batch_size_per_gpu": "from train_batch_size where DeepSpeed's batch "
        "rule gives it, else tiersim's default (--set training.micro_batch_size=N)",
        "gradient_accumulation_steps": "from train_batch_size where DeepSpeed's batch rule "
        "gives it, else tiersim's default (--set training.grad_accumulation=N)",
    }[key]
    out.note(key, f"{_filled_by(arg)}: {taken}")


def _filled_by(arg: str) -> str:
    return f"'auto' (transformers' Trainer fills it from TrainingArguments {arg}, not in the input)"


def precision_note(out: Mapped) -> None:
    """The precision sections left "auto": the other section's where it is enabled, else
    tiersim's default precision."""
    for key in out.facts.pop("precision_auto", []):
        given = out.facts.get("precision")
        taken = (
            f"{given} from {given}.enabled"
            if given
            else "tiersim's default precision (--set training.precision.weights=bf16 ...)"
        )
        out.note(key, f"{_filled_by(TRAINER[key])}: {taken}")


def hidden_value(out: Mapped, key: str) -> None:
    """A zero_optimization key the Trainer fills from the model's hidden size: kept, with its
    file, for the import to fill once the model is known (fill_from_hidden)."""
    out.facts.setdefault("hidden_auto", []).append((out.source, key))


def check_stage(out: Mapped) -> None:
    """The stage3 keys the Trainer fills under ZeRO-3 only: refused under another stage."""
    stage = out.values.get("parallel.zero_stage", 0)
    for _, key in out.facts.get("hidden_auto", []):
        if HIDDEN[key][3] and stage != 3:
            why = (
                f"is 'auto', which transformers' Trainer fills only under ZeRO-3 "
                f"(zero_optimization.stage is {stage}): DeepSpeed would refuse the string "
                "(expected a whole number >= 0)"
            )
            raise ValueProblem(key, why)


def _given(raw: dict[str, Any], path: str | None) -> bool:
    """Whether `raw` holds a value at `path` (the other spelling of a setting, by --set)."""
    held: Any = raw
    for key in path.split(".") if path else ():
        if not isinstance(held, dict) or key not in held:
            return False
        held = held[key]
    return path is not None


def fill_from_hidden(raw: dict[str, Any], keys: list, hidden: int) -> list[tuple[str, str, str]]:
    """Each "auto" key ((file, key)) the user did not `--set`, as the Trainer fills it from
    `hidden`: written into `raw`; (file, key, note) for each."""
    notes = []
    for source, key in keys:
        path, rule, said, _ = HIDDEN[key]
        *folders, last = path.split(".")
        held = raw
        for folder in folders:
            held = held.setdefault(folder, {})
        if last in held or _given(raw, alias_path(path)):  # by --set: the rest of the input wins
            continue
        held[last] = rule(hidden)
        why = f"'auto': {said} = {held[last]:,} (hidden size {hidden:,}), as the Trainer fills it"
        notes.append((source, key, why))
    return notes


def trainer_model(out: Mapped, cfg: dict[str, Any]) -> None:
    """A config with an "auto" anywhere is run by transformers' Trainer (only it fills them),
    so its model is a transformers model: training.implementation huggingface, whose
    attention is sdpa (transformers' default attn_implementation), not the megatron
    accounting's stored scores (review 2026-12-07-i: 79 % of a Llama 3 8B import's
    activations were softmax scores the Trainer's model never keeps)."""
    if not _has_auto(cfg):  # its model code is unsaid: noted once --set is applied (unsaid.py)
        out.facts["implementation_unsaid"] = out.source
        return
    out.put("training.implementation", "huggingface", '("auto" values)')
    why = (
        "'auto' values are filled by transformers' Trainer alone (HfTrainerDeepSpeedConfig), "
        "so the model is a transformers one: training.implementation: huggingface (attention "
        "sdpa, its default attn_implementation; --set training.attention_kernel=eager for "
        'attn_implementation="eager")'
    )
    out.note('("auto" values)', why)


def _has_auto(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_auto(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_auto(v) for v in value)
    return is_auto(value)
