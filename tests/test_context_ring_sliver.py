"""The context-parallel ring's blocking part (tiersim/workload/context.py `ring_comms`) is a
sliver of its flow, as the MoE all-to-all's was before issue 39 (docs/invariants.md, "A
sliver of an overlapped all-to-all"), but sized by its own pass's attention and waited for
after that pass: the pass costs F + max(0, R - A (c - 1)/c), F including A, so a faster GPU
(A shorter) shortens it. The scenario where a faster GPU turns a hidden ring into a blocking
sliver, under `ordered` with a ZeRO-2 reduce-scatter on the ring's NVLink, pipeline stages
and the step bound by a slow HBF link (the MoE violation's shape), is no slower."""

from __future__ import annotations

from engine_helpers import merge, scenario
from invariant_checks import FASTER, MODEL

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

# h 8192 with 2 key/value heads (a small K/V chunk beside a long attention), 2,048 tokens
# over 2 context ranks, the GPU timed by peak x efficiency (no kernel table) so that the
# attention speeds up with it; activations offloaded to HBF at 25 GB/s, which bounds the step
RAW = {
    "name": "cp-ring-sliver",
    "model": {**MODEL, "hidden": 8192, "heads": 64, "kv_heads": 2, "ffn_hidden": 32768},
    "training": {
        "seq_len": 2048,
        "micro_batch_size": 1,
        "grad_accumulation": 2,
        "optimizer": "adam",
        "recompute": "none",
        "implementation": "megatron",
        "optimizer_step": "synchronous",
    },
    "parallel": {"data": 2, "context": 2, "context_comm": "ring", "zero_stage": 2, "pipeline": 2},
    "placement": {"activations": "hbf"},
    "hardware": {
        "preset": "h200-hbf",
        "gpu": {"kernels": None},
        "links": {"hbf": {"bandwidth": "25 GB/s"}},
    },
    "simulation": {"link_sharing": "ordered"},
}
FASTER_GPU = merge(RAW, {"hardware": FASTER["gpu"]})


def test_a_faster_gpu_that_exposes_the_ring_never_slows_the_step():
    hidden, exposed = (build_workload(resolve(scenario(raw))).units[1] for raw in (RAW, FASTER_GPU))
    # the case the check is for: the ring wholly beside the attention at the preset's GPU,
    # a blocking sliver forward and backward at 4x its peak
    assert (hidden.cp_forward, hidden.cp_backward) == (None, None)
    assert exposed.cp_forward is not None and exposed.cp_backward is not None
    slow, fast = (simulate(scenario(raw)).time_s for raw in (RAW, FASTER_GPU))
    assert fast <= slow * (1 + 1e-9)
