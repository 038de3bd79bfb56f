"""The `huggingface` accounting of a mixture-of-experts MLP: what transformers 5 Mixtral's
sparse MoE block (MixtralTopKRouter and the experts' default `grouped_mm` implementation,
transformers.integrations.moe) keeps for backward, measured with saved_tensors_hooks, each
storage once (tests/test_moe_measure.py).

T = s·b tokens, R = k·T routed rows (dropless), dt the compute precision's bytes:

- the router: its input (dt·T·h), the fp32 softmax probabilities (4·T·E), the top-k indices
  (int64) and weights (fp32) (12·T·k), and the weights' fp32 sum, divided by in place (4·T);
- the dispatch: the sort order, token row (order // k) and inverse order, int64 (24·R), and
  the int32 cumulative rows per expert that `grouped_mm` takes (4·E);
- per routed row: the dispatched token (dt·h), the gate/up output kept whole (2f), SiLU's
  output and the product (f each), so 4f·dt, the down projection's output (dt·h) and the
  row's fp32 routing weight (4).

Routing is data dependent, but nothing here depends on how the R rows split over the experts:
`grouped_mm` runs every expert over one tensor of R rows sorted by expert, and the per-expert
row counts are one (E,) tensor. (transformers' `eager` experts loop over the experts hit and
keep per-expert index tensors: not this accounting.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item

if TYPE_CHECKING:
    from tiersim.state.layers import Moe
    from tiersim.state.transformer_shape import TransformerShape


def hf_moe_unsupported(moe: Moe) -> str | None:
    """What of an MoE the accounting (Mixtral's, Qwen2-MoE's, DeepSeek-V3's block) does not
    know, or None."""
    deepseek = moe.groups is not None
    for known, what in (
        (
            not moe.shared or moe.shared_gate or deepseek,
            "shared experts without a gate (Qwen2-MoE's) or DeepSeek-V3's router (expert_groups)",
        ),
        (not (deepseek and moe.shared_gate), "DeepSeek-V3's router with a shared-expert gate"),
        (moe.capacity_factor in (None, 1.0), "a capacity factor (Mixtral is dropless)"),
    ):
        if not known:
            return what
    return None


def hf_moe_mlp(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """Mixtral's sparse MoE block, router input included (the dense MLP's "mlp input"),
    Qwen2-MoE's where it has gated shared experts, DeepSeek-V3's where its router groups
    experts (expert_groups)."""
    assert m.moe is not None
    if m.moe.groups is not None:
        return deepseek_moe_mlp(m, s, b, acc)
    if m.moe.shared_gate:
        return qwen2_moe_mlp(m, s, b, acc)
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, m.moe.ffn_hidden
    e, k = m.moe.experts, m.moe.per_token
    rows = k * t
    return [
        Item("mlp", "router input", dt * t * h, False),
        Item("mlp", "router probabilities (fp32)", 4.0 * t * e, False),
        Item("mlp", "top-k indices (int64) and weights (fp32)", 12.0 * t * k, False),
        Item("mlp", "top-k weights' sum (fp32)", 4.0 * t, False),
        Item("mlp", "sort order, token rows and inverse order (int64)", 24.0 * rows, False),
        Item("mlp", "cumulative rows per expert (int32)", 4.0 * e, False),
        Item("mlp", "dispatched rows", dt * rows * h, True),
        Item("mlp", "gate/up output, SiLU output and product", 4.0 * dt * rows * f, True),
        Item("mlp", "experts' outputs", dt * rows * h, True),
        Item("mlp", "routing weight per row (fp32)", 4.0 * rows, False),
    ]


def qwen2_moe_mlp(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """transformers 5 Qwen2-MoE's sparse block (its configs' norm_topk_prob false): Mixtral's
    routed part less the top-k weights' division (no fp32 sum, no fp32 weights kept: the
    indices alone, 8·T·k), the routing weight per row cast to the compute precision, and the
    shared experts: SwiGLU's four T·fs tensors, the shared gate's sigmoid (dt·T) and the
    shared experts' output it multiplies (dt·T·h). Measured byte for byte on the CPU
    (tests/test_memory_timeline.py builds transformers' Qwen2MoeForCausalLM)."""
    moe = m.moe
    assert moe is not None
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, moe.ffn_hidden
    e, k = moe.experts, moe.per_token
    rows, fs = k * t, moe.shared * moe.shared_ffn_hidden
    return [
        Item("mlp", "router input", dt * t * h, False),
        Item("mlp", "router probabilities (fp32)", 4.0 * t * e, False),
        Item("mlp", "top-k indices (int64)", 8.0 * t * k, False),
        Item("mlp", "sort order, token rows and inverse order (int64)", 24.0 * rows, False),
        Item("mlp", "cumulative rows per expert (int32)", 4.0 * e, False),
        Item("mlp", "dispatched rows", dt * rows * h, True),
        Item("mlp", "gate/up output, SiLU output and product", 4.0 * dt * rows * f, True),
        Item("mlp", "experts' outputs", dt * rows * h, True),
        Item("mlp", "routing weight per row", dt * rows, False),
        Item("mlp", "shared experts' gate/up, SiLU and product", 4.0 * dt * t * fs, True),
        Item("mlp", "shared gate's sigmoid", dt * t, False),
        Item("mlp", "shared experts' output", dt * t * h, False),
    ]


def _grouped_router(m: TransformerShape, t: int, acc: Accounting) -> list[Item]:
    """DeepseekV3TopkRouter: its fp32 linear's input (the layer's MLP input itself in fp32, a
    copy below it), the sigmoid scores, the top-k indices and weights and the weights' sum
    (norm_topk_prob, DeepSeek-V3's configs). The group selection (each group's top-2, the best
    groups, the mask of the rest) saves indices and a mask too, but only the top-k's indices
    leave it (the weights are gathered from the scores): its nodes die with the router's
    locals, before backward. Its weight is kept in fp32 (_keep_in_fp32_modules_strict): no
    cast of it is saved."""
    moe = m.moe
    assert moe is not None and moe.groups is not None
    e, k, dt = moe.experts, moe.per_token, acc.compute_bytes
    items = [Item("mlp", "router input (fp32)", 4.0 * t * m.hidden, False)]
    if dt != 4 and moe.shared:  # the shared experts keep it in the compute precision too
        items.append(Item("mlp", "mlp input", dt * t * m.hidden, False))
    return [
        *items,
        Item("mlp", "router sigmoid scores (fp32)", 4.0 * t * e, False),
        Item("mlp", "top-k indices (int64) and weights (fp32)", 12.0 * t * k, False),
        Item("mlp", "top-k weights' sum (fp32)", 4.0 * t, False),
    ]


def deepseek_moe_mlp(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """transformers 5 DeepseekV3MoE: the grouped sigmoid router, the routed experts as one
    fused DeepseekV3Experts module on grouped_mm (Mixtral's dispatch and per-row tensors, the
    routing weight per row in fp32) and the shared experts as one SwiGLU MLP of width
    shared x moe_intermediate_size, without a gate. Measured byte for byte on the CPU
    (tests/test_hf_deepseek_moe.py builds transformers' DeepseekV3ForCausalLM)."""
    moe = m.moe
    assert moe is not None
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, moe.ffn_hidden
    rows, fs = moe.per_token * t, moe.shared * moe.shared_ffn_hidden
    shared = [Item("mlp", "shared experts' gate/up, SiLU and product", 4.0 * dt * t * fs, True)]
    return [
        *_grouped_router(m, t, acc),
        Item("mlp", "sort order, token rows and inverse order (int64)", 24.0 * rows, False),
        Item("mlp", "cumulative rows per expert (int32)", 4.0 * moe.experts, False),
        Item("mlp", "dispatched rows", dt * rows * h, True),
        Item("mlp", "gate/up output, SiLU output and product", 4.0 * dt * rows * f, True),
        Item("mlp", "experts' outputs", dt * rows * h, True),
        Item("mlp", "routing weight per row (fp32)", 4.0 * rows, False),
        *(shared if fs else []),
    ]


def hf_moe_backward_moments(
    moe: Moe,
    hidden: int,
    tokens: int,
    dt: float,
    experts: int,
    recomputed: bool,
    grads_kept: bool = False,
) -> list[Item]:
    """The three moments of transformers 5's routed experts' backward (grouped_mm) that hold
    the most beyond what the block saves, per micro-batch of `tokens` on a rank of `experts`;
    the layer's backward peak takes the largest (recorded on the CPU with the profiler's
    allocations, tests/test_hf_moe_backward.py). R = k·T routed rows, f the expert width; a
    weight's gradient is made whole, E experts at once, before it is added into `.grad`. All
    come after the index restoring the rows' order has let go of its int64 inverse order (8R):

    - the routing weight's product (experts' outputs x routing weight, its MulBackward0): the
      gradient of the product's rows (index's new_zeros), its product with the weight and its
      product with the experts' outputs, three R x h tensors at the product's precision (fp32
      where the routing weights are fp32, Mixtral's and DeepSeek-V3's, the outputs promoted;
      the compute precision in Qwen2-MoE's); where that is wider than the compute precision,
      the outputs' gradient cast back to it (dt·R·h) while they live, unless the layer is
      recomputed (a checkpoint's unpacked outputs are released before the cast);
    - the down weight gradient (down_proj, E x h x f) beside the gradient of the product's
      rows (R·f), the experts' outputs (R·h) freed and their gradient (R·h) alive: dt·(E·h·f
      + R·f);
    - the gate/up weight gradient (gate_up_proj, E x 2f x h) beside the gradients of the
      dispatched rows (R·h) and of the gate/up output (R·2f), the rows' gate/up output, SiLU,
      product (4f) and experts' outputs (h) freed: dt·(2E·f·h - 2R·f), none below zero;
      `grads_kept` (FSDP2: an unsharded parameter's `.grad` is None when its gradient is made,
      so AccumulateGrad keeps the tensor itself as `.grad` until the reduce-scatter) with the
      down weight's gradient still held beside it: dt·E·h·f more."""
    rows, f = moe.per_token * tokens, moe.ffn_hidden
    wide = dt if moe.shared_gate and moe.groups is None else max(dt, 4.0)
    cast = dt * rows * hidden if wide != dt and not recomputed else 0.0
    gate_up = dt * (experts * 2 * f * hidden + rows * hidden + rows * 2 * f)
    freed = dt * rows * (4 * f + hidden)
    kept_down = dt * experts * hidden * f if grads_kept else 0.0
    moments = [
        ("routing weight's product gradients", 3 * wide * rows * hidden + cast),
        ("experts' down weight gradient", dt * (experts * hidden + rows) * f),
        ("experts' gate/up weight gradient", gate_up - freed + kept_down),
    ]
    return [Item("backward", n, max(0.0, b - 8.0 * rows), False) for n, b in moments]
