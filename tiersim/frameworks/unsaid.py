"""What the configs leave unsaid that a scenario needs, checked once the `--set` values are
applied (a `--set` may give it): the model's vocabulary where a Megatron-LM tokenizer does not
say it (refused: exit 2) and the sequence length where no config gives one (noted: a DeepSpeed
or Accelerate config has no such key, so the scenario's default, the model's max_positions, is
taken, and a Hugging Face config's max_position_embeddings can be far longer than the run's
sequences), and the batch where a file has none (an Accelerate config: noted).
"""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import InputError, Problem


def unsaid(raw: dict[str, Any], facts: dict[str, Any], notes: list) -> None:
    _vocab_known(raw, facts)
    training = raw.get("training")
    _implementation(raw, facts, notes)
    if not isinstance(training, dict) or training.get("seq_len") is None:
        why = (
            "no config gives it (a DeepSpeed or Accelerate config has no sequence length): the "
            "scenario's default, the model's max_positions, else 2048 (expected --set "
            "training.seq_len=N, the length the run trains at)"
        )
        notes.append(("training.seq_len", Problem("", why, "W-IMPORT-ASSUMED")))
    batch = {"micro_batch_size", "global_batch_size"} & set(training or {})
    if facts.get("batch_unsaid") and not batch:
        why = (
            f"no config gives it ({facts['batch_unsaid']} has no batch: the training script's): "
            "the scenario's default, 1, no accumulation (expected --set "
            "training.micro_batch_size=N and training.global_batch_size=B)"
        )
        notes.append(("training.micro_batch_size", Problem("", why, "W-IMPORT-ASSUMED")))


def _implementation(raw: dict[str, Any], facts: dict[str, Any], notes: list) -> None:
    """A DeepSpeed config without "auto" values names no model code (with them the HF
    Trainer's: hf_auto.trainer_model): the scenario's default accounting, megatron's, said
    where no config and no --set gives training.implementation (review 2026-12-07-m: an
    import with --hf-config counted Megatron's eager attention, 17.18 GB of softmax scores,
    for a transformers model, and no note said so)."""
    source = facts.get("implementation_unsaid")
    training = raw.get("training")
    if source is None or (isinstance(training, dict) and "implementation" in training):
        return
    model = raw.get("model")
    hf = isinstance(model, dict) and "hf_config" in model
    why = (
        "training.implementation: megatron, the scenario's default: Megatron-LM's layers, whose "
        'eager attention stores the s x s softmax scores; a DeepSpeed config without "auto" '
        "names no model code"
        + ("; --hf-config gives the model's shapes, not the code that runs it" if hf else "")
        + " (expected --set training.implementation=huggingface for a transformers model as "
        "the HF Trainer or accelerate runs it, attention sdpa; or torchtitan)"
    )
    notes.append((source, Problem('(no "auto" values)', why, "W-IMPORT-ASSUMED")))


def _vocab_known(raw: dict[str, Any], facts: dict[str, Any]) -> None:
    """A Megatron tokenizer whose vocabulary the script does not give: refused unless a --set
    gave model.vocab (review 2026-12-07-i: the message named --vocab-size and --hf-config, and
    --set model.vocab=N, the scenario's own key, was refused with it)."""
    unknown = facts.get("vocab_unknown")
    model = raw.get("model")
    if unknown is None or (isinstance(model, dict) and ("vocab" in model or "hf_config" in model)):
        return
    source, exc = unknown
    raise InputError(source, [Problem(exc.key, exc.why, "E-IMPORT-VALUE")])
