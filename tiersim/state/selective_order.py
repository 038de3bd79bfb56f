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
set held (not measured here)."""

from __future__ import annotations

from tiersim.state.activation_kinds import Item

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
