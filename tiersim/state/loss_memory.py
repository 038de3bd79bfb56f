"""The loss's tensors and what one micro-batch keeps outside the layers, for the step's memory
timeline (state/step_memory.py; docs/memory.md says what is counted)."""

from __future__ import annotations

import math
from collections.abc import Callable

from tiersim.state.activations import outside_items
from tiersim.state.chunked_loss import chunked_loss
from tiersim.state.inventory import per_context_rank
from tiersim.state.model import Transformer
from tiersim.state.onednn_brgemm import known_scratchpad as gemm_scratchpad
from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Steps

HEAD_GRAD = "head's weight gradient"
GEMM_WORKSPACE = "GEMM workspace (oneDNN's scratchpad)"
HEAD_INPUTS = "final norm and output layer inputs"
# what the final norm, the head and the loss keep (their backward runs first and frees them
# before the last layer's: the log-softmax apart, the loss's own)
HEAD_SIDE = ("norms", "logits_and_loss")


def logits_values(r: Resolved) -> int:
    """Logits one GPU holds: s·b·V/(t·c) (vocab-parallel over t; a context rank's s/c tokens)."""
    model = r.model
    if not isinstance(model, Transformer):
        return 0
    x = r.execution
    tokens = x.seq_len // x.parallel.context * x.training.micro_batch_size
    return tokens * math.ceil(model.vocab / x.parallel.tensor)


def head_inputs(r: Resolved) -> int:
    """Under the `megatron` accounting (Korthikanti's per-layer terms, whatever the framework),
    what the final norm and the output layer keep from the forward to their backward, which
    its layers do not hold: the final norm's input and the output layer's input, each s·b·h in
    the compute precision; a context rank's s/c tokens, the sequence-parallel shard's s/t
    under sequence parallelism. Megatron-Core: Transformer Engine's RMSNorm
    (transformer_engine/pytorch/module/rmsnorm.py at 5c62f728, `_RMSNorm.forward`:
    `ctx.save_for_backward(inputmat, rmsnorm_weight, rsigma)`) and ColumnParallelLinear
    (megatron/core/tensor_parallel/layers.py at 000c4ac2,
    LinearWithGradAccumulationAndAsyncCommunication.forward: `ctx.save_for_backward(input,
    weight)`); PyTorch's modules keep the same two (the huggingface accounting's `final norm`
    and `output head input`, measured). The norm's per-token fp32 statistics (4 B a token)
    are left out, as in the layers'; the fp32 logits are the loss's own (below). 0 under the
    other accountings, whose outside items hold them (activations.py)."""
    model, x = r.model, r.execution
    if r.accounting.implementation != "megatron" or not isinstance(model, Transformer):
        return 0
    tokens = x.seq_len // x.parallel.context * x.training.micro_batch_size
    if x.parallel.sequence:
        tokens = math.ceil(tokens / x.parallel.tensor)
    return 2 * r.accounting.compute_bytes * tokens * model.hidden


def _nothing() -> None:
    return None


def loss_events(
    steps: Steps,
    r: Resolved,
    log_softmax: float,
    head_grad: int,
    between: Callable[[], None] = _nothing,
    held: bool = False,
) -> None:
    """The loss forward and backward on the last stage, tensor by tensor (the module's 2, 3);
    `head_grad`: the head's weight gradient, made while the logits' gradient lives (`held`:
    kept after the loss, state/vocab_grads.py); `between` adds what happens after the forward
    and before the backward."""
    n, cb = logits_values(r), r.accounting.compute_bytes
    # torchtitan's ChunkedLossWrapper, inside the forward; a generic model has no logits to chunk
    if r.accounting.loss_chunks > 1 and isinstance(r.model, Transformer):
        chunked_loss(steps, r, n, log_softmax, (head_grad, HEAD_GRAD), held)
        return between()
    if r.accounting.implementation == "megatron":
        _megatron_loss(steps, r, between)  # the head's gradient after it: FSDP2's root only
        return steps.alloc("backward: loss", "backward", "d head", HEAD_GRAD, head_grad)
    fw, bw, f, b = "forward: loss", "backward: loss", "forward", "backward"
    copy = "logits in fp32 (the loss's copy)"
    # transformers' loss: logits.float(), F.cross_entropy = log_softmax (kept) + nll_loss
    steps.alloc(fw, f, "logits", "logits", cb * n)
    if cb != 4:
        steps.alloc(fw, f, "logits fp32", copy, 4 * n)
    steps.alloc(fw, f, "log-softmax", "saved activations", log_softmax)
    steps.free(fw, f, "logits fp32", copy)
    steps.free(fw, f, "logits", "logits")  # a training loop drops the output before backward
    between()
    steps.alloc(bw, b, "d log-softmax", "loss gradient (fp32)", 4 * n)  # nll_loss_backward
    steps.alloc(bw, b, "d logits fp32", "loss gradient (fp32)", 4 * n)  # log_softmax_backward
    steps.free(bw, b, "d log-softmax", "loss gradient (fp32)")
    steps.free(bw, b, "log-softmax", "saved activations")
    if cb != 4:  # the cast's backward
        steps.alloc(bw, b, "d logits", "loss gradient (compute precision)", cb * n)
        steps.free(bw, b, "d logits fp32", "loss gradient (fp32)")
    steps.alloc(bw, b, "d head", HEAD_GRAD, head_grad)  # the head's matmul backward
    head_gemm_workspaces(steps, r, n)
    steps.free(bw, b, "d logits", "loss gradient (compute precision)")  # after the head's
    steps.free(bw, b, "d logits fp32", "loss gradient (fp32)")


def head_gemm_workspaces(steps: Steps, r: Resolved, logits: int) -> None:
    """On a CPU whose bf16 GEMMs take oneDNN without AMX (Accounting.cpu_gemm
    "onednn-avx512"), the scratchpads of the head's two backward products, each held inside
    its `mm` (state/onednn_brgemm.py), in MmBackward's order (measured): the weight's
    gradient, d logitsᵀ [V/t, T] x x [T, h] (A transposed: A's copy besides), its output
    beside; then the input's, d logits [T, V/t] x W [V/t, h]. On the other routes none is
    counted ("aten": 0 B; "onednn", AMX: no rule)."""
    acc, model = r.accounting, r.model
    if not (acc.device == "cpu" and acc.cpu_gemm == "onednn-avx512" and acc.compute_bytes == 2):
        return
    if not isinstance(model, Transformer) or logits == 0:
        return
    vocab = math.ceil(model.vocab / r.execution.parallel.tensor)
    tokens = logits // vocab
    for key, nbytes in (
        ("head weight gemm", gemm_scratchpad(vocab, tokens, model.hidden, a_transposed=True)),
        ("head input gemm", gemm_scratchpad(tokens, vocab, model.hidden)),
    ):
        steps.alloc("backward: loss", "backward", key, GEMM_WORKSPACE, nbytes)
        steps.free("backward: loss", "backward", key, GEMM_WORKSPACE)


def _megatron_loss(steps: Steps, r: Resolved, between: Callable[[], None]) -> None:
    """Megatron's vocab_parallel_cross_entropy and its fused native form (loss_fusion: native,
    fusions/fused_cross_entropy.py): the fp32 copy of the logits becomes the softmax in place
    and is kept; their backward works in place too. te (Transformer Engine's
    parallel_cross_entropy, cross_entropy.py) writes the gradient into the logits themselves
    in forward and keeps them: no fp32 copy."""
    n, cb = logits_values(r), r.accounting.compute_bytes
    fw, bw, f, b = "forward: loss", "backward: loss", "forward", "backward"
    steps.alloc(fw, f, "logits", "logits", cb * n)
    if cb != 4 and r.execution.training.loss_fusion != "te":
        steps.alloc(fw, f, "logits fp32", "logits in fp32 (kept by the loss)", 4 * n)
        steps.free(fw, f, "logits", "logits")
        between()
        steps.alloc(bw, b, "d logits", "loss gradient (compute precision)", cb * n)
        steps.free(bw, b, "logits fp32", "logits in fp32 (kept by the loss)")
        steps.free(bw, b, "d logits", "loss gradient (compute precision)")
    else:
        between()
        steps.free(bw, b, "logits", "logits")


def outside_saved(r: Resolved, stage: int, last: bool) -> tuple[float, float, float]:
    """What one micro-batch keeps outside the layers: (all of it, the loss's log-softmax, what
    the final norm and the head keep besides: freed by their backward, before the layers')."""
    model, par = r.model, r.execution.parallel
    if not isinstance(model, Transformer):
        return 0.0, 0.0, 0.0
    seq, mbs = r.execution.seq_len, r.execution.training.micro_batch_size
    items = outside_items(model, seq, mbs, r.accounting, stage == 0, last)
    split = [(i, i.nbytes / par.tensor if i.split or par.sequence else i.nbytes) for i in items]
    softmax = sum(b for i, b in split if "log-softmax" in i.name or "chunked loss" in i.name)
    head = sum(b for i, b in split if i.group in HEAD_SIDE) - softmax
    whole = sum(b for _, b in split)
    return per_context_rank(r, whole), per_context_rank(r, softmax), per_context_rank(r, head)


def final_norm_transients(r: Resolved) -> int:
    """The final norm's backward working set where transformers' RMSNorm computes in fp32
    (LlamaRMSNorm: `hidden_states.to(float32)`, pow, mean, rsqrt, two products): its backward
    holds four fp32 s·b·h tensors (pow's, the mean's division, the two products' gradients)
    and, for a 16-bit model, the incoming gradient cast to fp32, beside what the norm saved
    (measured on the CPU, torch 2.13: tests/test_step_measure.py, tests/test_fsdp2_step.py)."""
    model, x = r.model, r.execution
    if not isinstance(model, Transformer) or r.accounting.implementation != "huggingface":
        return 0
    if model.norm != "rmsnorm":
        return 0
    tokens = x.seq_len // x.parallel.context * x.training.micro_batch_size
    if x.parallel.sequence:
        tokens = math.ceil(tokens / x.parallel.tensor)
    tensors = 4 + (1 if r.accounting.compute_bytes != 4 else 0)
    return tensors * tokens * model.hidden * 4
