"""FSDP2's one unit over the whole model (`training.offload.fetch: model`: `fully_shard` on
the root alone, Accelerate's `fsdp_auto_wrap_policy: NO_WRAP`) timed as torch 2.13 runs it
(torch/distributed/fsdp/_fully_shard/): one FSDP parameter group holds every parameter, so

- one all-gather of the whole model a forward: the root's `pre_forward` unshards the group
  and waits for it before the model's first module runs (_fsdp_param_group.py 551-552):
  nothing is computed beside it, it is exposed;
- kept unsharded to the backward: `fully_shard` called without `reshard_after_forward`
  leaves it to the root (_fully_shard.py 246: `auto_reshard_after_forward`), and `_lazy_init`
  clears the root's `post_forward_mesh_info` (_fsdp_state.py 203-207), so `reshard` returns
  in forward: no all-gather before the backward. With `parallel.reshard_after_forward: true`
  given (an explicit True, kept by `_lazy_init`), the root reshards after forward and the
  backward's `pre_backward` gathers it all again, exposed as well;
- one reduce-scatter of every gradient after the backward: the group's `post_backward` runs
  from `_root_post_backward_final_callback` (_fsdp_state.py 395-415), which then makes the
  compute stream wait for it (421-430: `is_last_backward`, True unless the user sets it):
  exposed, every micro-batch (FSDP2 reduces every backward unless
  `set_requires_gradient_sync(False)`: as tiersim's layer grain, workload/work.py
  `gradients_every_microbatch`), and the group resharded there (`reshard_after_backward`,
  True: _fsdp_param_group.py 223, 636-637), so each micro-batch's forward gathers again.

The layer units keep their compute, their FSDP2 copies (workload/fsdp_exposure.py: the sum
of the layers' copy-out and chunk_cat bytes is the group's) and their other collectives; the
first layer, whose forward is the step's first and whose backward is its last, carries the
one all-gather and the one reduce-scatter of every unit's bytes (the rest's included), each
paying one call's latency; the other units none. The bytes are the layer grain's. With the
weights homed off the GPU (FSDP2's CPUOffloadPolicy) the carrier brings every unit's shard
from their home before its gather, and no other unit fetches its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.core.frozen import replaced
from tiersim.workload.data_parallel import data_comms

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit

_SUMMED = ("params", "weights_full", "gradients_full", "expert_weights_full")


def applies(r: Resolved) -> bool:
    """The whole model is one FSDP2 unit: `fetch: model` in force (config/framework.py
    `offload_plan` keeps it only under `whole_model_unit`)."""
    return r.execution.offload.fetch == "model"


def whole_model_grain(r: Resolved, units: list[Unit]) -> list[Unit]:
    """The stage's units (its layers, then its rest) with their data-parallel all-gathers and
    reduce-scatters as the one unit's (module docstring); unchanged where that does not
    apply or nothing is gathered or reduced."""
    if not applies(r) or not units or not any(u.dp_weights or u.dp_gradients for u in units):
        return units
    sums = {k: sum(getattr(u, k) for u in units) for k in _SUMMED}
    sums["expert_gradients_full"] = sum(u.expert_gradients_full for u in units)
    comms = data_comms(r, replaced(units[0], **sums))  # one call over every unit's bytes
    first = replaced(
        units[0],
        dp_weights=comms.get("dp_weights"),
        dp_gradients=comms.get("dp_gradients"),
        whole_model=sum(u.homed["weights"] for u in units),
    )
    rest = [replaced(u, dp_weights=None, dp_gradients=None) for u in units[1:]]
    return [first, *rest]
