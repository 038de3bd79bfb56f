"""The memory DeepSpeed ZeRO++'s hpZ adds: a secondary partition of the 16-bit weights.

partition_parameters.py `_partition_param_sec` (deepspeedai/DeepSpeed at 57073d13): each
release of a gathered parameter (`_partition`, after its forward and its backward) copies this
rank's `secondary_partition_size = tensor_size // num_ranks_in_param_group` elements of it, in
the parameter's dtype, into `ds_secondary_tensor`, allocated once on `self.remote_device` (the
weights' home: GPU memory, or the host under `offload_param`). stage3.py `_post_step` frees it
after the update (`invalidate_secondary_tensor`) and the next forward's release makes it again:
it is held from the first forward to the update, counted here in the weights class all step
(weights / h per GPU beside the primary partition's weights / d; docs/zero-plus-plus.md). The
per-tensor padding to a multiple of d is not counted, as for the primary partition.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.zeropp import hpz_ranks

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def secondary_weight_bytes(r: Resolved, raw_weights: int) -> int:
    """Bytes of the hpZ secondary partition of `raw_weights` (the tensors' whole 16-bit
    weights) one GPU holds: ceil(raw / h); 0 without hpZ."""
    h = hpz_ranks(r.execution.training, r.execution.parallel)
    return 0 if h <= 1 else math.ceil(raw_weights / h)
