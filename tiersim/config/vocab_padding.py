"""The vocabulary the embedding and the output layer really hold: the tokenizer's, padded as the
framework pads it, resolved once at the edge (tiersim.state.resolved.resolve) so the weights,
their gradients and optimizer state, the logits, the loss and the logits GEMM all use it.

- megatron (Megatron-LM, Megatron-Core, NeMo): the tokenizer's vocabulary padded up to a
  multiple of `make_vocab_size_divisible_by` x tensor-parallel size, default 128. Megatron-LM:
  megatron/training/tokenizer/tokenizer.py, `_vocab_size_with_padding` (multiple =
  args.make_vocab_size_divisible_by * args.tensor_model_parallel_size, rounded up), the flag
  `--make-vocab-size-divisible-by` (arguments.py, default 128); NeMo 1.x: megatron_base_model.py
  `_build_vocab` (`cfg.get('make_vocab_size_divisible_by', 128)` x tensor_model_parallel_size).
  Megatron-DeepSpeed runs the same code: give the key (128) with another framework.
- no framework, deepspeed, fsdp (transformers, torchtitan): the configured vocabulary as it is
  (transformers' `vocab_size`, torchtitan's `TransformerModelArgs.vocab_size`); a tensor-
  parallel rank holds ceil(V / t) rows of it.

`training.make_vocab_size_divisible_by` given always wins, under any framework.
"""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

MEGATRON_DIVISOR = 128  # --make-vocab-size-divisible-by's default (Megatron-LM, NeMo)


def vocab_divisor(s: Scenario) -> int | None:
    """`training.make_vocab_size_divisible_by` as given, else its framework's (None: the
    vocabulary is not padded; a generic model has none to pad)."""
    given = s.training.make_vocab_size_divisible_by
    if given is not None:
        return given
    transformer = s.model.parameters is None
    return MEGATRON_DIVISOR if s.training.framework == "megatron" and transformer else None


def padded_vocab(vocab: int, divisor: int | None, tensor: int) -> int:
    """`vocab` rounded up to a multiple of divisor x tensor (Megatron's rule); as it is where
    `divisor` is None."""
    if divisor is None:
        return vocab
    multiple = divisor * tensor
    return -(-vocab // multiple) * multiple


def scenario_vocab(s: Scenario) -> int | None:
    """The padded vocabulary of `s`'s model (None: no vocabulary known, or a generic model,
    whose `model.vocab` builds no embedding to pad)."""
    vocab = s.model.vocab
    if vocab is None or s.model.parameters is not None:
        return None
    return padded_vocab(vocab, vocab_divisor(s), s.parallel.tensor)


def padding_note(s: Scenario) -> str:
    """'vocabulary 50,257 padded to 50,688 (make_vocab_size_divisible_by 128 x tensor 4)'
    where the framework pads it, else ''."""
    vocab, padded = s.model.vocab, scenario_vocab(s)
    if padded is None or padded == vocab:
        return ""
    return (
        f"vocabulary {vocab:,} padded to {padded:,} (make_vocab_size_divisible_by "
        f"{vocab_divisor(s)} x tensor {s.parallel.tensor})"
    )


def vocab_padding_notes(s: Scenario) -> list[Problem]:
    """The key given on a generic model, which has no embedding or output layer to pad."""
    divisor = s.training.make_vocab_size_divisible_by
    if divisor is None or s.model.parameters is None:
        return []
    why = (
        f"{divisor} has no effect: the model is generic (a parameter count and layers), so it "
        "has no embedding or output layer to pad (give the transformer's dimensions, a preset "
        "or an hf_config)"
    )
    return [Problem("training.make_vocab_size_divisible_by", why, "W-NO-EFFECT")]
