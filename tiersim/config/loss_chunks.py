"""Checks of `training.loss_chunks`, torchtitan's chunked loss (ChunkedLossWrapper,
torchtitan/components/loss.py; state/chunked_loss.py): only torchtitan's code chunks the loss,
and it splits each micro-batch's tokens into equal chunks (`torch._check(seq_len %
num_chunks == 0)`, the tokens on one context-parallel rank)."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

WHERE = "training.loss_chunks"
# torchtitan's config registry trains with ChunkedLossWrapper, num_chunks 8 by default
# (torchtitan components/loss.py; models/llama3/config_registry.py llama3_8b); megatron's and
# transformers' code compute the loss in one piece
DEFAULT_LOSS_CHUNKS = {"megatron": 1, "huggingface": 1, "torchtitan": 8}


def loss_chunk_problems(s: Scenario) -> list[Problem]:
    t = s.training
    if t.loss_chunks is not None and t.loss_chunks > 1 and t.implementation != "torchtitan":
        why = (
            f"is {t.loss_chunks}, but training.implementation {t.implementation} computes the "
            "loss in one piece (expected 1, or implementation: torchtitan, whose "
            "ChunkedLossWrapper chunks it)"
        )
        return [Problem(WHERE, why, "E-CONFLICT")]
    chunks = t.loss_chunks or DEFAULT_LOSS_CHUNKS[t.implementation]
    tokens = s.seq_len // s.parallel.context * t.micro_batch_size
    if tokens % chunks:
        given = f"is {chunks}" if t.loss_chunks else f"is torchtitan's default {chunks}"
        why = (
            f"{given}, which does not divide a micro-batch's {tokens} tokens on one GPU "
            "(ChunkedLossWrapper splits them into equal chunks: expected a divisor of "
            f"{tokens}, e.g. {_nearest_divisors(tokens, chunks)})"
        )
        return [Problem(WHERE, why, "E-VALUE")]
    return []


def _nearest_divisors(tokens: int, chunks: int) -> str:
    """The divisors of `tokens` on either side of `chunks` ('2 or 4' for 3 of 4096), each
    looked for within 10,000 of it (the counts run to 2^40: no full search)."""
    top = min(chunks, tokens)
    below = next((d for d in range(top, max(top - 10_000, 0), -1) if tokens % d == 0), 1)
    above = next((d for d in range(chunks + 1, min(chunks + 10_000, tokens) + 1)
                  if tokens % d == 0), None)  # fmt: skip
    return f"{below}" if above is None or above == below else f"{below} or {above}"
