"""The kernels of a mixture-of-experts layer's MoE block beyond its GEMMs' FLOPs, for one
micro-batch on one GPU (docs/moe.md): the router's score kernels, the token permutation
before the dispatch and the un-permutation after the combine, the re-sorting of received
tokens by local expert, and the routed experts' share of the layer's time on the busiest rank.

Counts, per micro-batch on one GPU, with T = s·b / (t·c) tokens (tensor- and context-parallel
split, as the all-to-all's), E routed experts, k of them per token, capacity factor p (1 when
dropless), h hidden, e = `parallel.expert` ranks, E / e experts a GPU holds, and
R = k·p·T·h routed elements (16-bit activations, 2 B):

- router (Megatron-Core's TopKRouter, scores in fp32, 4 B per score, T·E scores): forward the
  logits cast to fp32 (read 2, write 4), the score function (softmax or sigmoid: read 4,
  write 4), top-k (read 4) and the probabilities and routing map scattered back to T x E
  (write 4 + 1) = 23 B per score; backward the scattered gradient gathered (read 4), the
  score function's backward (read the gradient and the scores, write one: 12) and the cast
  back (read 4, write 2) = 22 B per score. The top-k's k indices and weights (12 B each) are
  left out: k << E.
- permutation (Megatron-Core's `permute`/`unpermute`, moe_utils.py, fused or not the same
  bytes): permute gathers each routed row (read 2, write 2 per routed element: 4·R);
  unpermute reads each expert output row (2·R), weighs it by its probability and sums the k
  rows of a token into its output (written, 2 B per token element); forward 6·R + 2·T·h.
  Backward: unpermute's backward permutes the output gradient (4·R) and reads the expert
  outputs again for the probabilities' gradient (2·R); permute's backward sums the k
  gradient rows of a token (2·R read, 2·T·h written): 8·R + 2·T·h.
- received tokens sorted by local expert and back (`sort_chunks_by_idxs`, the all-to-all
  dispatcher's, only where a GPU holds more than one expert and e > 1): read and write each
  received row before the experts and after them, 8 B per received element each way. The
  busiest rank receives `parallel.expert_imbalance` x R.

Every byte at HBM bandwidth x `gpu.memory_efficiency`, as the dense layer's memory-bound
kernels (tiersim/workload/kernels.py). The routed experts' GEMMs on the busiest rank take
`expert_imbalance` x their balanced FLOPs: the slowest rank sets the pace of the combine every
rank waits for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.core.records import record

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

ROUTER_B = (23.0, 22.0)  # per router score (fp32), forward and backward
PERMUTE_ROUTED_B = (6.0, 8.0)  # per routed element, permute + unpermute, forward and backward
PERMUTE_TOKEN_B = (2.0, 2.0)  # per token element: unpermute's output, permute's gradient sum
SORT_B = (8.0, 8.0)  # per received element: sorted by local expert and back


@record
class MoeShape:
    """One micro-batch's MoE block sizes on one GPU (the module docstring's names)."""

    tokens: float  # T
    experts: int  # E
    per_token: int  # k
    padding: float  # p
    hidden: int  # h
    expert_ranks: int  # e
    imbalance: float  # the busiest rank's received rows over the mean

    @property
    def routed(self) -> float:
        """R: routed elements this GPU permutes and sends (its own tokens)."""
        return self.per_token * self.padding * self.tokens * self.hidden

    @property
    def received(self) -> float:
        """Routed elements the busiest rank receives and runs its experts over."""
        return self.routed * self.imbalance

    @property
    def sorts(self) -> bool:
        """The dispatcher re-sorts received tokens by local expert (E / e > 1, e > 1)."""
        return self.expert_ranks > 1 and self.experts // self.expert_ranks > 1


def moe_shape(r: Resolved, model) -> MoeShape:
    """The MoE block's sizes for one micro-batch under the scenario's layout."""
    par, ex, moe = r.execution.parallel, r.execution, model.moe
    tokens = ex.seq_len // par.context * ex.training.micro_batch_size / par.tensor
    return MoeShape(
        tokens,
        moe.experts,
        moe.per_token,
        moe.padding,
        model.hidden,
        par.expert,
        moe.busiest(par.expert_imbalance, par.expert),
    )


def moe_bytes(shape: MoeShape, direction: int) -> float:
    """HBM bytes of the router, the permutation and the re-sorting in one pass (0 forward,
    1 backward)."""
    scores = shape.tokens * shape.experts
    tokens = shape.tokens * shape.hidden
    nbytes = ROUTER_B[direction] * scores
    nbytes += PERMUTE_ROUTED_B[direction] * shape.routed + PERMUTE_TOKEN_B[direction] * tokens
    if shape.sorts:
        nbytes += SORT_B[direction] * shape.received
    return nbytes


def busiest_rank_slowdown(routed_share: float, grouped_share: float, imbalance: float) -> float:
    """How much longer the layer's GEMMs take than at the dense rate with balanced routing:
    the routed experts' share s of the FLOPs, run as grouped GEMMs at the share g of the
    dense rate, over `imbalance` x the mean rows: 1 - s + s x imbalance / g."""
    return 1.0 - routed_share + routed_share * imbalance / grouped_share
