"""One unit of the step's work on one GPU, as the engine runs it: a transformer layer of the
simulated stage or the stage's rest (embeddings, final norm, output head), its bytes per class,
its compute times and the communication it waits for. `work` builds units; `data_parallel`,
which `work` calls, reads them, so the record lives here, below both.
"""

from __future__ import annotations

from collections.abc import Mapping

from tiersim.core.records import record
from tiersim.workload.comms import Comm


@record
class Unit:
    name: str
    params: int  # parameters this GPU holds for the unit (after tensor division)
    weights_full: int  # bytes compute needs in HBM
    gradients_full: int  # bytes backward produces
    homed: Mapping[str, int]  # bytes of each per-parameter class homed per GPU (its shard
    # where sharded)
    gradients_for_update: int  # gradient bytes the optimizer reads (its shard)
    weights_updated: int  # weight bytes the optimizer produces (its shard)
    activations: int  # bytes retained per micro-batch
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_gpu_s: float
    optimizer_cpu_s: float
    tp_forward: Comm | None = None  # blocking, in the GPU stream, per micro-batch
    tp_backward: Comm | None = None
    dp_weights: Comm | None = None  # all-gather of sharded weights before each use
    # ... under DeepSpeed ZeRO++ hpZ, every gather but a step's first forward's: within the hpZ
    # group, from the secondary partition (workload/zeropp.py)
    dp_weights_secondary: Comm | None = None
    dp_gradients: Comm | None = None  # reduce-scatter or all-reduce of the unit's gradients
    dp_parameters: Comm | None = None  # all-gather of updated weights after the optimizer
    embedding_sync: Comm | None = None  # tied embeddings: first and last stage, before update
    expert_weights_full: int = 0  # the routed experts' share of weights_full
    muon_values: int = 0  # values of its tensors Muon updates (DeepSpeed ZeRO-3's gathers)
    expert_gradients_full: int = 0
    ep_forward: Comm | None = None  # expert parallelism's all-to-alls, blocking, per micro-batch
    ep_backward: Comm | None = None
    # ... with overlap_expert_comm, the part hidden beside the other pass: flows, not blocking
    ep_forward_hidden: Comm | None = None
    ep_backward_hidden: Comm | None = None
    # ... and the pass that runs alone without pipelining (the first micro-batch's forward,
    # the last's backward: experts.alone_unit): its blocking all-to-alls (forward, backward)
    # and the SM-share slowdowns the paired passes carry (forward's, backward's)
    ep_alone: tuple[Comm | None, Comm | None, float, float] | None = None
    home: Mapping[str, str] | None = None  # the unit's own home of each class (a layer's
    # routed experts placed apart: placement.experts); None: the scenario's homes
    cp_forward: Comm | None = None  # context parallelism's exchange that blocks, per mb
    cp_backward: Comm | None = None
    cp_forward_hidden: Comm | None = None  # ... and what flows beside the attention blocks
    cp_backward_hidden: Comm | None = None
    expert_homed: Mapping[str, int] | None = None  # the routed experts' part of `homed`
    # (first dim, second or 0 if 1-D, values, count) of its tensors where DeepSpeed ZeRO++ qgZ
    # reduces their gradients (workload/zeropp.py qgz_shapes)
    grad_shapes: tuple[tuple[int, int, int, int], ...] = ()
    hpz_secondary: int = 0  # bytes of ZeRO++ hpZ's secondary partition of it (state/zeropp.py)
    hpz_persistent: int = 0  # ... of which in persistent parameters
    # FSDP2's one unit over the whole model (training.offload.fetch: model): on the unit that
    # carries every unit's all-gather and reduce-scatter as one each (the first forward's and
    # last backward's, workload/whole_model.py), the whole model's weight bytes homed on this
    # GPU (the shard its gather reads from their home); 0 on every other unit
    whole_model: int = 0
    # DeepSpeed ZeRO-3: values of its weights the coordinator keeps gathered from its forward to
    # its backward, which the backward does not gather again (workload/zero3_reuse.py)
    kept_values: int = 0
    # ... of them in persistent parameters (at most stage3_param_persistence_threshold values),
    # gathered once a step: only the step's first forward gathers them (workload/zero3_reuse.py)
    persistent_values: int = 0
    # bytes of its hpZ secondary partition in the values kept (`kept_values`, persistent ones
    # included): its forward releases, and writes the secondary of, only the rest
    hpz_kept: int = 0
