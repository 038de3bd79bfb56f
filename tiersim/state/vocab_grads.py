"""The vocabulary's weight gradients as autograd makes them, for the step's memory timeline
(state/step_memory.py): the output projection's and the embedding's, V/t x h values each.

Recorded on the CPU (torch 2.13, transformers 5, profiler memory events; GPT-2 with 2 layers,
vocabulary 50,257, hidden 768, bf16, tests/test_vocab_grads.py):

- the head's matmul backward makes its weight gradient (V x h in the gradients' precision:
  77.2 MB) while the logits' gradient is alive; AccumulateGrad adds it into `.grad` and frees
  it at once, unless the weight is tied to the embedding: autograd then keeps it until the
  embedding's backward has made its own gradient, because a tensor used twice gets one
  gradient, the sum of both uses (torch/csrc/autograd/input_buffer.cpp, accumulate);
- the embedding's backward (embedding_dense_backward) makes a dense V x h gradient, whatever
  few rows the batch touched; tied, the sum of the two is a third V x h tensor, so the end of
  backward holds three (GPT-2 above: 428.5 MB + 3 x 77.2 MB = 660.1 MB, the step's peak).

Megatron is not counted here: its output layer's weight gradient is accumulated into the fp32
main_grad by the wgrad GEMM (gradient_accumulation_fusion); its embedding's dense gradient is a
term not counted yet (docs/memory.md).
"""

from __future__ import annotations

import math

from tiersim.core.records import record
from tiersim.state.loss_memory import HEAD_GRAD
from tiersim.state.model import Transformer
from tiersim.state.resolved import Resolved


@record
class VocabGrads:
    """Bytes one GPU makes: the head's weight gradient in the loss's backward (kept to the
    embedding's backward where `held`), the embedding's dense gradient, and a tied weight's
    sum of the two."""

    head: int = 0
    held: bool = False
    embedding: int = 0
    summed: int = 0


def vocab_grads(r: Resolved, stage: int, grad_bytes: int, root_held: bool) -> VocabGrads:
    """The vocabulary gradients of one GPU of `stage`, each value `grad_bytes` (the gradient's
    precision, unsharded); `root_held`: FSDP2's root group (embeddings and head together)
    reduce-scatters its gradients only after its whole backward, so the head's is kept too."""
    model, par = r.model, r.execution.parallel
    # Megatron's grad buffers hold them, but FSDP2's root group makes them as autograd's
    # unsharded gradients, kept to its reduce-scatter, whatever layer code runs (review o)
    fsdp2 = root_held and r.execution.training.framework == "fsdp"
    megatron = r.accounting.implementation == "megatron" and not fsdp2
    if not isinstance(model, Transformer) or megatron:
        return VocabGrads()
    nbytes = math.ceil(model.vocab / par.tensor) * model.hidden * grad_bytes
    first, last = stage == 0, stage == par.pipeline - 1
    # a chunked loss makes the head's gradient in its own graph inside the forward, where
    # AccumulateGrad takes it into .grad: the embedding's backward then adds into that .grad,
    # no input buffer sums the two uses (state/chunked_loss.py)
    tied = model.tied_embeddings and first and last and r.accounting.loss_chunks == 1
    return VocabGrads(
        head=nbytes if last else 0,
        held=last and (tied or (root_held and first)),
        embedding=nbytes if first else 0,
        summed=nbytes if tied else 0,
    )


EMBEDDING_GRAD = "embedding's weight gradient (dense)"
TIED_SUM = "tied weight's summed gradient"


def embedding_grads(steps, vocab: VocabGrads, p) -> None:
    """The embedding's backward: its dense gradient, a tied weight's sum with the head's
    (vocab_grads above), then AccumulateGrad, or FSDP2's root reduce-scatter."""
    at, b = "backward: embeddings", "backward"
    if p.zero3:
        p.zero3.enter(steps, at, b)
    steps.alloc(at, b, "d embedding", EMBEDDING_GRAD, vocab.embedding)
    steps.alloc(at, b, "d tied", TIED_SUM, vocab.summed)
    grads = [("d embedding", EMBEDDING_GRAD), ("d head", HEAD_GRAD), ("d tied", TIED_SUM)]
    if p.fsdp2:
        p.fsdp2.reduce_scatter(steps, at, b, p.groups[-1], grads)
        p.fsdp2.end_of_backward(steps, at)
    for key, part in grads:
        steps.free(at, b, key, part)
    if p.zero3:
        p.zero3.leave(steps, at, b)
