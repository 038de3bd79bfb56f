"""How many data-parallel gradient reductions a framework lets run once it issues one beside
the backward (the new one included), and the wait that bound puts on the GPU's stream
(rsqueue, issue 38).

Sharded gradients (ZeRO-2, ZeRO-3 / FSDP) are reduced every micro-batch, each unit's whole
gradient buffer held until its reduction ends (engine/schedule_passes.py `write_gradients`).
Issued without a bound, they queue when the network is slower than the backward and the
buffers waiting pile up with the micro-batches. The frameworks bound them, each by a wait of
its compute stream (or its host thread) at a reduction's issue (under DeepSpeed, a
bucket's reduction: engine/bucket_flush.py):

- DeepSpeed ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py @ 02aa38c3): with
  `overlap_comm`, `average_tensor` makes the compute stream wait for the reduction stream
  (`get_accelerator().current_stream().wait_stream(stream)`) before it queues the bucket's
  reduction there, and `reduce_independent_p_g_buckets_and_remove_grads` swaps between two
  ipg buffers (`bucket.index = 1 - bucket.index`): the one reduced before must end first, 1
  running (the new one). Without `overlap_comm` (ZeRO-1/2's default) the reduction runs on
  the current stream (`stream = get_accelerator().current_stream()`): 0, the GPU waits for it.
- DeepSpeed ZeRO-3 (deepspeed/runtime/zero/stage3.py @ 007cca6a,
  `__reduce_and_partition_ipg_grads`): `if len(self.param_reduce_events) >
  self.max_param_reduce_events: self.param_reduce_events.popleft().synchronize()` before it
  queues the bucket's reduction, `self.max_param_reduce_events: int = 2` ("TODO. make this
  configurable via JSON"): at most two earlier ones beside the new one, 3.
- PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py @ 002a76fb,
  `post_backward`): the current stream waits for the previous group's reduce-scatter event
  (`self.comm_ctx.reduce_scatter_state.event`) before `foreach_reduce` issues the next, whose
  input (`reduce_scatter_input`, _fsdp_collectives.py @ 010ae4a8) the state keeps until then:
  1 running (the new one). tiersim's generic engine (no framework) takes PyTorch's.
- Megatron-Core's DDP (megatron/core/distributed/param_and_grad_buffer.py @ 00119989,
  `start_grad_sync`): each bucket's reduce-scatter or all-reduce runs asynchronously in place
  in the persistent grad buffer, waited for only in `finish_grad_sync`: no bound, and nothing
  held per reduction.
"""

from __future__ import annotations

from tiersim.engine.ops import Role
from tiersim.engine.phases import Context

COLLECTIVE = Role.COLLECTIVE  # read once: an enum member read is a Python call (CPython 3.11)


def in_flight_bound(c: Context) -> int | None:
    """Reductions running once one is issued, itself included (0: the GPU waits for it at
    once); None: no bound (Megatron's)."""
    plan = c.plan
    if plan.framework == "megatron":
        return None
    if plan.framework == "deepspeed":
        if c.res.execution.parallel.zero_stage == 3:
            return 3  # max_param_reduce_events 2 earlier, beside the new one
        return 1 if plan.overlap_comm else 0
    return 1


class InFlight:
    """The overlapped reductions issued and not yet waited for, oldest first."""

    __slots__ = ("depth", "issued", "step")

    def __init__(self, depth: int | None, issued: list[int] | None = None, step: int = -1):
        self.depth, self.issued, self.step = depth, issued or [], step

    def fork(self) -> InFlight:
        return InFlight(self.depth, list(self.issued), self.step)

    def issue(self, ops, reduction: int | None, step: int, name: str) -> None:
        """`reduction` issued (None: none, or one that frees no buffer, ZeRO-0/1's): beyond
        the bound, the GPU's stream waits for the one the bound lets go no further (what comes
        after on the stream, the next backward, waits too)."""
        if self.depth is None or reduction is None:
            return
        if step != self.step:
            # a step's backward ends waiting for all its reductions (FSDP2's
            # _fsdp_state.py `_root_post_backward_final_callback` waits for the last
            # reduce-scatter's event; the update needs every reduced shard): none is left
            # running into the next step, whose ops then wait on nothing of the step before
            # (engine/step_after_copy.py takes such a step as its plain twin)
            self.issued.clear()
            self.step = step
        self.issued.append(reduction)
        if len(self.issued) > self.depth:
            earlier = self.issued[-1 - self.depth]
            label = ("wait for gradient reduction before {}", name)
            ops.barrier(label, step, (earlier,), COLLECTIVE)
            del self.issued[: len(self.issued) - self.depth]
