"""torchtitan's chunked loss in the step's memory timeline (state/step_memory.py): its config
registry trains with `ChunkedLossWrapper` (torchtitan/components/loss.py; num_chunks 8 by
default, `training.loss_chunks`), which runs the output head and the cross-entropy, forward
and backward, on 1/N of the tokens at a time inside the forward pass:

1. the decoder's output, the hidden states [T, h] (the head's input, `pred`), split into N
   views along the tokens, each detached as a leaf;
2. a GradAccumulator: an fp32 buffer [T, h] (`zeros_like(..., dtype=torch.float32)`);
3. for each chunk: the head's logits (T/N x V/t in the compute precision), the loss's fp32
   copy (`pred.float()` where the compute precision is below fp32) and log-softmax
   (F.cross_entropy); at once `chunk_loss.backward()`: nll_loss's and log_softmax's fp32
   gradients, the cast's gradient in the compute precision, the head's weight gradient
   (added into `.grad`) and the chunk's head-input gradient, copied into the buffer (through
   an fp32 copy where it is not fp32 already) and dropped;
4. the buffer cast to the hidden states' dtype (the buffer itself in fp32) is what
   `_DecoderOutputGradientBackProp` saves for backward; the trainer drops `pred` before
   `loss.backward()` (torchtitan/trainer.py: "need to free pred before bwd"). Its backward
   hands that gradient to the final norm.

So no logits, no log-softmax over all the tokens is kept between forward and backward, and the
loss's largest transients are 1/N of the unchunked ones.
"""

from __future__ import annotations

from typing import Any

from tiersim.state.model import Transformer
from tiersim.state.resolved import Resolved

FW, BW = ("forward: loss", "forward"), ("backward: loss", "backward")
FP32_COPY = "logits in fp32 (the loss's copy)"
D_FP32, D_CB = "loss gradient (fp32)", "loss gradient (compute precision)"
KEPT = "saved activations"


def chunked_loss(steps: Any, r: Resolved, logits: int, kept: float, head: tuple[int, str]) -> None:
    """The chunk loop's allocations and frees on one GPU: `logits` values over all chunks
    (tokens x V/t), `kept` the accumulated gradient's bytes (the accounting's outside item),
    `head` the head's weight gradient (bytes, its part's name)."""
    model, x = r.model, r.execution
    assert isinstance(model, Transformer)
    chunks, cb = r.accounting.loss_chunks, r.accounting.compute_bytes
    tokens = x.seq_len // x.parallel.context * x.training.micro_batch_size
    hidden = tokens * model.hidden
    steps.alloc(*FW, "hidden states", "hidden states (the head's input)", cb * hidden)
    steps.alloc(*FW, "grad buffer", "chunked loss: head-input gradient (fp32 buffer)", 4 * hidden)
    _one_chunk(steps, logits / chunks, hidden / chunks, cb, head)
    buffer = ("grad buffer", "chunked loss: head-input gradient (fp32 buffer)")
    if cb == 4:  # .to(torch.float32) hands back the buffer itself
        steps.free(*FW, *buffer)
    steps.alloc(*FW, "loss kept", KEPT, kept)  # the buffer cast to the compute precision
    steps.free(*FW, *buffer)  # with the accumulator, as the loss returns
    steps.free(*FW, "hidden states", "hidden states (the head's input)")  # del pred
    steps.free(*BW, "loss kept", KEPT)  # handed to the final norm's backward


def _one_chunk(steps: Any, c: float, ch: float, cb: int, head: tuple[int, str]) -> None:
    """One chunk's forward and backward (every chunk alike, each freeing what it made):
    `c` logits values, `ch` head-input values."""
    steps.alloc(*FW, "chunk logits", "logits (one chunk)", cb * c)
    if cb != 4:
        steps.alloc(*FW, "chunk logits fp32", FP32_COPY, 4 * c)
    steps.alloc(*FW, "chunk log-softmax", "log-softmax (one chunk, fp32)", 4 * c)
    steps.free(*FW, "chunk logits fp32", FP32_COPY)
    steps.alloc(*FW, "chunk d log-softmax", D_FP32, 4 * c)  # nll_loss_backward
    steps.alloc(*FW, "chunk d logits fp32", D_FP32, 4 * c)  # log_softmax_backward
    steps.free(*FW, "chunk d log-softmax", D_FP32)
    steps.free(*FW, "chunk log-softmax", "log-softmax (one chunk, fp32)")
    if cb != 4:  # the cast's backward
        steps.alloc(*FW, "chunk d logits", D_CB, cb * c)
        steps.free(*FW, "chunk d logits fp32", D_FP32)
    steps.alloc(*FW, "d head", head[1], head[0])  # the head's matmul backward
    steps.alloc(*FW, "chunk d hidden", "head-input gradient (one chunk)", cb * ch)
    steps.free(*FW, "chunk d logits", D_CB)
    steps.free(*FW, "chunk d logits fp32", D_FP32)
    steps.free(*FW, "d head", head[1])  # AccumulateGrad adds it into .grad
    if cb != 4:  # GradAccumulator.add: chunk_grad.to(torch.float32), copied into the buffer
        steps.alloc(*FW, "chunk d hidden fp32", "head-input gradient (one chunk, fp32)", 4 * ch)
        steps.free(*FW, "chunk d hidden fp32", "head-input gradient (one chunk, fp32)")
    steps.free(*FW, "chunk d hidden", "head-input gradient (one chunk)")  # h_chunk.grad = None
    steps.free(*FW, "chunk logits", "logits (one chunk)")
