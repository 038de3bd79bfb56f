"""What `training.framework` implies for the parallel engine's communication overlap: each
`parallel` overlap key left out (null) takes its framework's default here, once, into the
execution plan (config/execution.py) and the scenario.yaml a run writes (config/document.py).
Every default is the framework's own, each still overridable in the scenario; none is a fitted
figure.

- megatron (Megatron-LM / Megatron-Core, megatron/training/arguments.py): the tensor-parallel
  input-gradient all-reduce runs beside the weight-gradient GEMM (asynchronous since late 2021;
  `--no-async-tensor-model-parallel-allreduce` the opt-out): overlap_tensor_backward true;
  the data-parallel gradient reduce after backward unless `--overlap-grad-reduce`:
  overlap_gradient_reduce false; the forward's tensor-parallel collectives blocking unless
  `--tp-comm-overlap`: overlap_tensor_forward false.
- no framework, deepspeed, fsdp: tiersim's generic engine's (gradients reduced as each bucket
  is ready, tensor-parallel collectives blocking).
"""

from __future__ import annotations

from tiersim.config.schema import Parallel, Scenario

_GENERIC = {
    "overlap_tensor_backward": False,
    "overlap_gradient_reduce": True,
    "overlap_tensor_forward": False,
}
_DEFAULTS = {
    "megatron": {
        "overlap_tensor_backward": True,
        "overlap_gradient_reduce": False,
        "overlap_tensor_forward": False,
    },
}


def parallel_defaults(framework: str | None) -> dict[str, bool]:
    """The overlap keys' defaults under `framework` (None: no framework)."""
    return dict(_DEFAULTS.get(framework or "", _GENERIC))


def resolved_parallel(s: Scenario) -> Parallel:
    """`parallel` with each overlap key the scenario leaves out set to its framework's
    default."""
    given = s.parallel
    defaults = parallel_defaults(s.training.framework)
    update = {k: v for k, v in defaults.items() if getattr(given, k) is None}
    return given.model_copy(update=update) if update else given
