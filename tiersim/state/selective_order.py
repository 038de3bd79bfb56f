"""When selective recompute's working set exists in a layer's backward (issue 38).

Autograd runs a transformers layer's backward from its output: the MLP first (its saved
tensors freed as each node runs), then the post-attention norm, the out-projection, and only
then the checkpointed attention core, which recomputes its scores there. Recorded on the CPU
(torch 2.13, transformers 5, the grouped-query model of tests/test_step_measure.py, eager
attention, bf16): the last layer's backward starts at 5.75 MiB, its MLP's backward peaks at
6.00 MiB, the MLP's and post-attention norm's saved tensors are freed down to 5.16 MiB, and the
core's recompute and backward then peak at 5.91 MiB. So the recomputed scores sit beside the
attention's own saved tensors (its inputs, q, k, v), not the layer's whole saved set.

Under the huggingface accounting the timeline frees this share of the saved set before it
allocates the recompute working set (state/step_memory.py); other accountings keep the whole
set held (not measured here).

What the core holds at its backward's peak (eager attention): measured on the same model at
hidden 64 (4 heads of 16, MLP 384, bf16, tests/test_selective_order.py), the recomputed fp32
softmax output (saved for its backward), its output's gradient cast up to fp32
(ToCopyBackward0) and `_softmax_backward_data`'s fp32 result: three fp32 s² tensors, the bf16
probabilities and their bf16 gradient freed by then; the MLP's gradients long gone, the
gradient flowing between layers left. The timeline had counted the two s² tensors the core
saves (1.5 fp32 ones) beside the MLP's gradients: 202,856 B under at the GQA model's hidden 64,
where this moment is the step's peak (-8.2 % under FSDP2 on 2 ranks, issue 38)."""

from __future__ import annotations

from typing import Any

from tiersim.state.activation_kinds import Item
from tiersim.state.fsdp2_memory import GRADS

# what runs its backward before the attention core's, by the accounting's item names: the MLP
# (or MoE block) and, beside it, the post-attention norm (Llama's; GPT-2's ln_2) and the
# out-projection's input (o_proj; GPT-2's c_proj of the attention)
FIRST_NORMS = ("post-attention norm", "ln_2")
FIRST_INPUTS = ("o_proj input", "c_proj input")


def freed_before_core(items: list[Item]) -> list[Item]:
    """The layer's saved items that its backward frees before the attention core recomputes."""
    return [
        i
        for i in items
        if i.group == "mlp" or i.name.startswith(FIRST_NORMS) or i.name in FIRST_INPUTS
    ]


REPEATED_KV = "k, v repeated to every head"  # state/activations.py, eager Llama-style attention


def core_backward_peak(items: list[Item], kept_kv: float = 0.0) -> float:
    """The bytes eager attention's core holds at its backward's peak, one micro-batch, from
    the accounting's items: 3 x its saved softmax output (that output, its gradient in the
    softmax's dtype, the softmax's backward result); 0 where the core saves no softmax output.
    Beside them K and V repeated to every head, recomputed inside the core (`repeat_kv`: new
    tensors where there are fewer kv heads), both recorded held then (tests/test_step_measure.py
    at hidden 64: +802,816 B from the core's start = 3 x 262,144 + 2 x 16,384 repeated, less
    the out-projection's output gradient, 16,384, freed). `kept_kv`: the K and V the
    checkpoint keeps, at the kv heads (the repeat's own storage where they are the same
    bytes: a view, nothing new)."""
    scores = sum(3 * i.nbytes for i in items if i.name == "softmax output")
    repeated = sum(i.nbytes for i in items if i.name == REPEATED_KV)
    return scores + (repeated if scores and repeated != kept_kv else 0.0)


def recompute_core(
    steps: Any, at: str, i: int, lay: Any, kept: float, group: Any, grad_bytes: int
) -> None:
    """Layer `i`'s backward (state/step_memory.py, its parts' names): the MLP's share of the
    saved set freed, and but for gradients kept inside (FSDP2's MoE) its gradients too, the
    flowing one left; under FSDP2 (`group`: the layer's FSDP group's key) the weights'
    gradients made so far held unsharded (the MLP's, the out-projection's, the post-attention
    norm's: more than the first); then the core's working set allocated."""
    b = "backward"
    steps.free(at, b, f"saved first {i}", "saved activations")
    if lay.core_working and not kept:
        steps.free(at, b, f"working {i}", "backward transients")
        steps.alloc(at, b, f"working {i}", "backward transients", lay.core_working)
        key, nbytes = f"grad first {group}", lay.core_grads * grad_bytes
        if group and nbytes > steps.held.get(key, 0):
            steps.free(at, b, key, GRADS)
            steps.alloc(at, b, key, GRADS, nbytes, 5)
    steps.alloc(at, b, f"recompute {i}", "recompute working set", lay.recompute, lay.items)
