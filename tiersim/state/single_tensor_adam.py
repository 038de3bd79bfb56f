"""torch.optim's single-tensor Adam/AdamW step (the path it takes on CPU tensors; torch 2.13's
adam.py `_single_tensor_adam`): for each parameter in turn,
`denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` makes two tensors of the
parameter's size (the square root, freed once divided, and the quotient), while the loop's
variable `denom` still holds the previous parameter's denominator until the new one is
assigned. So the step holds at most `prev + 2 * cur` values for two parameters in a row:
three of one size where two equal matrices follow each other (the MLP's gate and up), not the
two of the largest counted before (measured on the CPU under FSDP2, tests/test_fsdp2_step.py's
matrix: the grouped-query model's optimizer phase was 2.85 % short on 1, 2 and 4 ranks).
"""

from __future__ import annotations

from collections.abc import Sequence

from tiersim.state.torchao_adamw8bit import local_shards


def peak_values(tensors: Sequence, shards: int, largest: int) -> int:
    """Values the single-tensor Adam loop holds at most: two temporaries of a parameter's
    size beside the previous parameter's denominator, in the order state/layers.py lists a
    unit's tensors (transformers' order in a layer: attention, MLP, norms; units in turn,
    the embedding's unit last: its embedding follows a layer's norm where in PyTorch it
    comes first, a norm's values too many there, below the head's, which follows the final
    norm). A layer's fused experts (state/layers.py's Matrix.fused, one entry) are two
    tensors: gate_up, then down (1 of its `down_every` pieces). Without the tensors, two of
    the largest."""
    sizes = []
    for t, n in local_shards(tensors, shards):
        per = getattr(t, "down_every", 0) if getattr(t, "fused", False) else 0
        # transformers 5's fused experts: gate_up (2 of 3 pieces, 1 of 2 ungated), then down
        sizes += [n - n // per, n // per] if per else [n]
    if not sizes:
        return 2 * largest
    return max(prev + 2 * n for prev, n in zip([0, *sizes], sizes, strict=False))
