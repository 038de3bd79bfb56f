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

The head's weight gradient: AccumulateGrad steals the first chunk's as `.grad` and adds each
later chunk's into it in place, freeing it (`variable_grad += new_grad` with grad mode off:
torch 2.13.0 at cf30153c, torch/csrc/autograd/functions/accumulate_grad.h). Where `.grad` is
resident (the `gradients` class) that is a transient a chunk; under FSDP2's root group
(`held`: the head wrapped with the embeddings, the whole model one unit under `fetch: model`)
`.grad` is the group's unsharded gradient, which nothing reduces until the root's
reduce-scatter after the whole backward (torch 2.13.0 at cf30153c,
distributed/fsdp/_fully_shard/_fsdp_state.py `_root_post_backward_final_callback` ->
_fsdp_param_group.py `post_backward` reads `unsharded_param.grad`): the first chunk's
gradient is kept from the loss to the embeddings' backward (state/vocab_grads.py), and every
later chunk's transient lies beside it. ChunkedLossWrapper's own FSDP2 path (torchtitan 0.3.0
components/loss.py: `set_requires_gradient_sync(False)` until the last chunk) runs only where
the head is an FSDPModule of its own (torchtitan's `fully_shard([norm, lm_head])`), which the
groups modelled here (layers and the root) do not make.
"""

from __future__ import annotations

from typing import Any

from tiersim.state.model import Transformer
from tiersim.state.resolved import Resolved

FW, BW = ("forward: loss", "forward"), ("backward: loss", "backward")
FP32_COPY = "logits in fp32 (the loss's copy)"
D_FP32, D_CB = "loss gradient (fp32)", "loss gradient (compute precision)"
KEPT = "saved activations"


def chunked_loss(
    steps: Any, r: Resolved, logits: int, kept: float, head: tuple[int, str], held: bool
) -> None:
    """The chunk loop's allocations and frees on one GPU: `logits` values over all chunks
    (tokens x V/t), `kept` the accumulated gradient's bytes (the accounting's outside item),
    `head` the head's weight gradient (bytes, its part's name), `held`: its first chunk's
    kept as FSDP2's unsharded `.grad` (the module's docstring)."""
    model, x = r.model, r.execution
    assert isinstance(model, Transformer)
    chunks, cb = r.accounting.loss_chunks, r.accounting.compute_bytes
    tokens = x.seq_len // x.parallel.context * x.training.micro_batch_size
    hidden = tokens * model.hidden
    steps.alloc(*FW, "hidden states", "hidden states (the head's input)", cb * hidden)
    steps.alloc(*FW, "grad buffer", "chunked loss: head-input gradient (fp32 buffer)", 4 * hidden)
    _one_chunk(steps, logits / chunks, hidden / chunks, cb, head, "d head", held)
    if held:  # every later chunk alike: its gradient added into the kept .grad, then freed
        _one_chunk(steps, logits / chunks, hidden / chunks, cb, head, "chunk d head", False)
    buffer = ("grad buffer", "chunked loss: head-input gradient (fp32 buffer)")
    if cb == 4:  # .to(torch.float32) hands back the buffer itself
        steps.free(*FW, *buffer)
    steps.alloc(*FW, "loss kept", KEPT, kept)  # the buffer cast to the compute precision
    steps.free(*FW, *buffer)  # with the accumulator, as the loss returns
    steps.free(*FW, "hidden states", "hidden states (the head's input)")  # del pred
    steps.free(*BW, "loss kept", KEPT)  # handed to the final norm's backward


def _one_chunk(
    steps: Any, c: float, ch: float, cb: int, head: tuple[int, str], key: str, keep: bool
) -> None:
    """One chunk's forward and backward (every chunk alike, each freeing what it made, the
    head's gradient `key` apart where `keep`): `c` logits values, `ch` head-input values."""
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
    steps.alloc(*FW, key, head[1], head[0])  # the head's matmul backward
    steps.alloc(*FW, "chunk d hidden", "head-input gradient (one chunk)", cb * ch)
    steps.free(*FW, "chunk d logits", D_CB)
    steps.free(*FW, "chunk d logits fp32", D_FP32)
    if not keep:  # AccumulateGrad adds it into .grad
        steps.free(*FW, key, head[1])
    if cb != 4:  # GradAccumulator.add: chunk_grad.to(torch.float32), copied into the buffer
        steps.alloc(*FW, "chunk d hidden fp32", "head-input gradient (one chunk, fp32)", 4 * ch)
        steps.free(*FW, "chunk d hidden fp32", "head-input gradient (one chunk, fp32)")
    steps.free(*FW, "chunk d hidden", "head-input gradient (one chunk)")  # h_chunk.grad = None
    steps.free(*FW, "chunk logits", "logits (one chunk)")
