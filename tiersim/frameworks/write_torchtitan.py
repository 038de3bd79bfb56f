"""A scenario as a torchtitan TOML: the inverse of tiersim.frameworks.torchtitan."""

from __future__ import annotations

import json

from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.loss_chunks import DEFAULT_LOSS_CHUNKS
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.frameworks.torchtitan import DTYPES, PRESETS
from tiersim.frameworks.written import Emitted, framework_note, global_batch, world
from tiersim.state.optimizers import optimizer as optimizer_named


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | list):
        return json.dumps(value)
    return f"{value}"


def write_torchtitan(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    framework_note(s, "torchtitan", "fsdp", notes)
    if s.model.mtp_layers:
        why = (
            f"{s.model.mtp_layers}: not written (torchtitan's model code runs no "
            "multi-token-prediction module; the file imports alone with --set "
            "model.mtp_layers=0)"
        )
        notes.append(Problem("model.mtp_layers", why, "W-EMIT-APPROXIMATE"))
    tables: dict[str, dict[str, object]] = {}
    flavor = {preset: key for key, preset in PRESETS.items()}.get(s.model.preset)
    if flavor is None:
        given = s.model.preset or "given by dimensions"
        notes.append(
            Problem(
                "model",
                f"{given}: no torchtitan flavor (import it with --hf-config)",
                "W-EMIT-APPROXIMATE",
            )
        )
    else:
        tables["model"] = {"name": flavor[0], "flavor": flavor[1]}
    tables["training"] = _training(s, notes)
    tables.update(_float8(s, tables.get("model"), notes))
    tables["parallelism"] = _parallelism(s, notes)
    tables.update(_the_rest(s, notes))
    chunks = s.training.loss_chunks or DEFAULT_LOSS_CHUNKS[s.training.implementation]
    if chunks > 1:  # ChunkedLossWrapper.Config.num_chunks, at the config's path loss.num_chunks
        tables["loss"] = {"num_chunks": chunks}
    lines = [f"# written by tiersim from scenario {s.name}: {world(s)} GPUs"]
    for name, body in tables.items():
        lines.append(f"\n[{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in body.items()]
    return Emitted("torchtitan", "\n".join(lines) + "\n", notes)


def _training(s: Scenario, notes: list[Problem]) -> dict[str, object]:
    t, pl, pr = s.training, s.placement, s.training.precision
    dtypes = {ours: theirs for theirs, ours in DTYPES.items()}
    # under PP a local batch is split into microbatches (torchtitan.py `_pp_micro`): the
    # accumulated micro-batches are one local batch, one pipeline schedule, not one each
    pp = s.parallel.pipeline > 1
    training: dict[str, object] = {
        "local_batch_size": t.micro_batch_size * (t.grad_accumulation if pp else 1),
        "global_batch_size": global_batch(s),
        "seq_len": s.seq_len,
        "mixed_precision_param": dtypes.get(pr.compute_precision, "bfloat16"),
        "mixed_precision_reduce": dtypes.get(pr.gradients, "float32"),
    }
    if (pr.weights, pr.master, pr.optimizer) != ("fp32", "none", "fp32"):
        why = (
            f"{pr.weights}/{pr.master}/{pr.optimizer}: torchtitan keeps fp32 sharded "
            "parameters (the master copy) and fp32 optimizer state"
        )
        notes.append(Problem("training.precision", why, "W-EMIT-APPROXIMATE"))
    classes = ("weights", "gradients", "master", "optimizer")
    offloaded = [c for c in classes if getattr(pl, c) != "hbm"]
    if offloaded:
        training["enable_cpu_offload"] = True
        if offloaded != list(classes) or pl.optimizer_compute != "cpu":
            why = "torchtitan's CPU offload moves every class to the host"
            notes.append(Problem("placement", why, "W-EMIT-APPROXIMATE"))
    return training


def _float8(s: Scenario, model: dict | None, notes: list[Problem]) -> dict[str, dict]:
    """training.fp8 as torchtitan's float8 converter (model.converters) and its [float8]
    settings, which import reads back (torchtitan.py `_fp8`); none without a [model] table
    to name the converter in."""
    fp8 = s.training.fp8
    if fp8 is None:
        return {}
    if fp8.attention:
        why = "true: torchao's Float8Linear converts the linear layers alone (attention bf16)"
        notes.append(Problem("training.fp8.attention", why, "W-EMIT-APPROXIMATE"))
    if model is None:
        return {}
    model["converters"] = ["float8"]
    settings = {"recipe_name": fp8.recipe, "enable_fsdp_float8_all_gather": fp8.param_gather}
    return {"float8": settings}


def _parallelism(s: Scenario, notes: list[Problem]) -> dict[str, object]:
    p = s.parallel
    shard = p.data if p.zero_stage == 3 else 1
    if shard > 1 and p.shard_group:  # HSDP: shards within groups, replicated across them,
        shard = p.shard_group  # as the reader takes replicate x shard (review 2026-12-07-i)
    if p.zero_stage in (1, 2):
        why = f"{p.zero_stage}: torchtitan shards all (FSDP) or none"
        notes.append(Problem("parallel.zero_stage", why, "W-EMIT-APPROXIMATE"))
    out: dict[str, object] = {
        "data_parallel_replicate_degree": p.data // shard,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": p.tensor,
        "pipeline_parallel_degree": p.pipeline,
        "context_parallel_degree": p.context,  # was left out, noted (review 2026-12-07-i)
        "expert_parallel_degree": p.expert,
    }
    if p.pipeline > 1:  # the micro-batch the pipeline runs (the local batch: _training)
        out["pipeline_parallel_microbatch_size"] = s.training.micro_batch_size
    if p.tensor > 1 and not p.sequence:
        why = (
            "false: torchtitan's tensor parallelism always shards the norms and the residual "
            "on the sequence (SequenceParallel in its TP plan); the file runs with it"
        )
        notes.append(Problem("parallel.sequence", why, "W-EMIT-APPROXIMATE"))
    overlap = resolved_parallel(s)  # a null key: the scenario's framework's default
    if overlap.overlap_tensor_forward and overlap.overlap_tensor_backward:
        out["enable_async_tensor_parallel"] = True
    return out


def _the_rest(s: Scenario, notes: list[Problem]) -> dict[str, dict[str, object]]:
    """[activation_checkpoint], [optimizer] and [checkpoint]."""
    t = s.training
    checkpointing: dict[str, object] = {"mode": t.recompute}
    if t.recompute == "full" and (t.recompute_every or 1) > 1:  # layer SAC, every n-th block
        checkpointing = {"mode": "selective", "selective_ac_option": str(t.recompute_every)}
    if t.recompute in ("selective", "selective_op"):
        # torchtitan's selective is by op or every n-th layer; its op-level policy is
        # selective_op, which importing gives back (torchtitan.py)
        checkpointing = {"mode": "selective", "selective_ac_option": "op"}
    if t.recompute == "selective":
        why = (
            "selective: written as torchtitan's op-level selective checkpointing (every other "
            "matmul's and attention's outputs saved, the rest recomputed: selective_op), the "
            "nearest; it has no option recomputing the attention core alone"
        )
        notes.append(Problem("training.recompute", why, "W-EMIT-APPROXIMATE"))
    tables: dict[str, dict[str, object]] = {"activation_checkpoint": checkpointing}
    optimizer = optimizer_named(t.optimizer).torchtitan_name  # state/optimizers.py
    if not optimizer:
        why = f"{t.optimizer}: torchtitan's are Adam and AdamW"
        notes.append(Problem("training.optimizer", why, "W-EMIT-APPROXIMATE"))
    else:
        tables["optimizer"] = {"name": optimizer}
    if t.compile is not None:  # [compile] enable, which the reader maps onto training.compile
        tables["compile"] = {"enable": t.compile}
    if s.checkpoint.every_steps not in (None, "auto"):
        tables["checkpoint"] = {
            "enable_checkpoint": True,
            "interval": s.checkpoint.every_steps,
            "async_mode": "async" if s.checkpoint.mode == "async" else "disabled",
        }
    return tables
