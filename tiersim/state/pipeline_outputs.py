"""Pipeline stage outputs that NeMo 1.x keeps whole until their backward (docs/nemo-memory.md).

Megatron-Core's pipeline schedules (megatron/core/pipeline_parallel/schedules.py) keep each
model chunk's forward output in `output_tensors` for its backward and, once it is sent to the
next stage, call `deallocate_output_tensor(output_tensor, config.deallocate_pipeline_outputs)`,
which frees its data (`out.data = torch.empty((1,))`, keeping only `.grad_fn`) where the flag
is set and returns at once where it is not. Megatron-LM sets it
(megatron/training/arguments.py `core_transformer_config_from_args`:
`kw_args['deallocate_pipeline_outputs'] = True`); NeMo 1.x does not
(nemo/collections/nlp/models/language_modeling/megatron_base_model.py at 7ed54557,
`build_model_parallel_config`: `"deallocate_pipeline_outputs": False,  # not supported in
NeMo`). Under NeMo, then, every chunk output in flight stays whole until its backward: the
residual stream after the chunk's last layer, the pipeline's p2p tensor shape
[s/cp (/t under sequence parallelism), b, h] in the compute precision (NeMo's
`pipeline_dtype = self.torch_dtype`). No other tensor holds it: the layer that reads it runs on
the next stage, from its own received copy.

tiersim knows a run is NeMo 1.x's by `training.distributed_optimizer: apex` (the apex
DistributedFusedAdam that only NeMo 1.x drives); a NeMo run with Megatron-Core's optimizer is
not told apart from Megatron-LM and keeps nothing here.

How many outputs a stage keeps at once follows the schedule (state/stages.py
`interleaved_peak`, Megatron's warm-up of (p - k - 1)·2 + (v - 1)·p forwards, then one forward
before each backward): every chunk's forward keeps one, except on the last stage the last
chunk's, whose output is the loss.
"""

from __future__ import annotations

import math

from tiersim.state.resolved import Resolved
from tiersim.state.stages import interleaved_peak

PIPELINE_OUTPUTS = "pipeline outputs kept (NeMo: deallocate_pipeline_outputs False)"


def keeps_outputs(r: Resolved) -> bool:
    """NeMo 1.x's Megatron-Core pipeline (`distributed_optimizer: apex`) over several stages."""
    ex = r.execution
    return (
        ex.training.framework == "megatron"
        and ex.training.distributed_optimizer == "apex"
        and ex.parallel.pipeline > 1
    )


def output_bytes(r: Resolved) -> int:
    """One chunk output: [s/cp (/t with sequence parallelism), b, h] in the compute precision
    (Megatron-Core's `get_tensor_shapes`: `seq_length // context_parallel_size`, then
    `// tensor_model_parallel_size` under sequence parallelism)."""
    ex, par = r.execution, r.execution.parallel
    seq = ex.seq_len // par.context
    if par.sequence and par.tensor > 1:
        seq //= par.tensor
    hidden = getattr(r.model, "hidden", None) or 0  # a model given by its parameter count: none
    return seq * ex.training.micro_batch_size * hidden * r.accounting.compute_bytes


def kept_outputs(r: Resolved, stage: int) -> int:
    """Chunk outputs `stage` holds at once at its peak (0 where they are freed)."""
    if not keeps_outputs(r):
        return 0
    p, v = r.execution.parallel.pipeline, r.execution.parallel.virtual_pipeline
    m = r.execution.training.grad_accumulation
    last = stage == p - 1
    weights = [1.0] * v
    weights[-1] = 0.0 if last else 1.0  # the last stage's last chunk returns the loss
    if v == 1:
        return 0 if last else min(p - stage, m)
    return math.ceil(interleaved_peak(stage, p, v, m, weights))


def kept_output_bytes(r: Resolved, stage: int) -> int:
    """Bytes of the chunk outputs `stage` keeps at its peak (NeMo 1.x), all step."""
    kept = kept_outputs(r, stage)
    return kept * output_bytes(r) if kept else 0
