"""Megatron-LM's vocabulary flags onto the scenario: `model.vocab` is the tokenizer's (--vocab-size,
else GPT-2's 50,257 for GPT2BPETokenizer), and --make-vocab-size-divisible-by (arguments.py,
default 128) -> `training.make_vocab_size_divisible_by` where given (absent: framework
megatron's default, 128); the padding itself is resolved once (config/vocab_padding.py).

Megatron-Bridge pads only where its model provider's `should_pad_vocab` is true
(src/megatron/bridge/models/gpt_provider.py, default false): a recipe whose model comes from
Hugging Face (AutoBridge.from_hf_pretrained) keeps the checkpoint's vocab_size as it is
(`bridge_keeps_vocab`).
"""

from __future__ import annotations

from typing import Protocol

from tiersim.config.vocab_padding import MEGATRON_DIVISOR
from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import ValueProblem

GPT2_VOCAB = 50257  # the GPT-2 BPE vocabulary (gpt2-vocab.json) Megatron's GPT examples use
KEY = "training.make_vocab_size_divisible_by"


class Flags(Protocol):
    def has(self, name: str) -> bool: ...

    def value(self, name: str) -> str | None: ...

    def integer(self, name: str, low: int = 1) -> int | None: ...


def tokenizer_vocab(args: Flags) -> int:
    """The tokenizer's vocabulary: --vocab-size, else GPT2BPETokenizer's."""
    given = args.integer("vocab-size")
    tokenizer = args.value("tokenizer-type")
    args.has("vocab-file")
    if given is not None:
        return given
    if tokenizer not in (None, "GPT2BPETokenizer"):
        raise ValueProblem(
            "--vocab-size",
            f"absent, and the vocabulary of --tokenizer-type {tokenizer} is not known "
            "here (expected --vocab-size N, --hf-config, or --set model.vocab=N)",
        )
    return GPT2_VOCAB


def vocab_divisor(args: Flags, out: Mapped) -> None:
    """training.make_vocab_size_divisible_by from the flag; absent, framework megatron's
    default (128) pads it."""
    out.facts["should_pad_vocab"] = args.has("should-pad-vocab")  # a Bridge provider's
    given = args.integer("make-vocab-size-divisible-by")
    if given is not None:
        out.put(KEY, given, "--make-vocab-size-divisible-by")
        return
    why = (
        f"absent: {MEGATRON_DIVISOR}, Megatron-LM's default under training.framework megatron "
        "(the vocabulary padded to a multiple of it x tensor-parallel size); with another "
        f"framework (Megatron-DeepSpeed) give {KEY}: {MEGATRON_DIVISOR}"
    )
    out.note("--make-vocab-size-divisible-by", why)


def bridge_keeps_vocab(out: Mapped, key: str) -> None:
    """A Megatron-Bridge recipe's Hugging Face model: its vocab_size unpadded (1) unless the
    recipe sets model.should_pad_vocab (read into out.facts by `vocab_divisor`). The one note
    it gives replaces `vocab_divisor`'s (an absent divisor taken as 128, or the recipe's
    divisor), which is not what runs: two contradicting notes were printed (review
    2026-12-07-f)."""
    if out.facts.get("should_pad_vocab"):
        return
    given = out.values.get(KEY)  # the recipe's model.make_vocab_size_divisible_by
    out.notes[:] = [n for n in out.notes if n.path != "--make-vocab-size-divisible-by"]
    out.put(KEY, 1, key)
    unused = f"; the recipe's divisor {given} is not applied" if given is not None else ""
    why = (
        "Megatron-Bridge keeps a Hugging Face model's vocab_size unpadded (its provider's "
        f"should_pad_vocab defaults to false{unused}): training.make_vocab_size_divisible_by 1"
    )
    out.note(key, why)
