"""A scenario written back in a framework's own format (`plan --emit`, `compare --emit`):
a DeepSpeed JSON config, a Megatron-LM launch script, a torchtitan TOML.

Each writer is the inverse of its reader (deepspeed.py, megatron.py, torchtitan.py): importing
what it writes, with the same model and hardware, gives the scenario back (tests/
test_emit.py). What the framework's format cannot say (a tier it has no device for, tensor
parallelism in a DeepSpeed JSON) is returned as notes, never written as something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.frameworks.torchtitan import DTYPES, PRESETS

EXTENSIONS = {"deepspeed": "json", "megatron": "sh", "torchtitan": "toml"}
_DS_TIER = {"dram": "cpu", "nvme": "nvme"}
_DS_OPTIMIZER = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "lion": "Lion"}
_OFFLOAD_KEYS = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "max_live_parameters": "stage3_max_live_parameters",
    "sub_group_size": "sub_group_size",
    "reduce_bucket_size": "reduce_bucket_size",
    "overlap_comm": "overlap_comm",
}


@dataclass
class Emitted:
    kind: str
    text: str
    notes: list[Problem] = field(default_factory=list)


def global_batch(s: Scenario) -> int:
    t = s.training
    return t.micro_batch_size * t.grad_accumulation * s.parallel.data


def _world(s: Scenario) -> int:
    p = s.parallel
    return p.data * p.tensor * p.pipeline


def _framework_note(s: Scenario, kind: str, framework: str, notes: list[Problem]) -> None:
    given = s.training.framework
    if given != framework:
        why = f"{given or 'none (generic)'}: written for {kind}, whose engine is {framework}'s"
        notes.append(Problem("training.framework", why))


def emit(s: Scenario, kind: str) -> Emitted:
    """`s` in the format of `kind` (deepspeed, megatron or torchtitan), with a note for each
    execution key the written file does not give back when imported."""
    writer = {"deepspeed": _deepspeed, "megatron": _megatron, "torchtitan": _torchtitan}[kind]
    out = writer(s)
    noted = {n.path for n in out.notes}
    for path, (ours, theirs) in read_back_differences(s, kind, out.text).items():
        if path not in noted and path.rpartition(".")[0] not in noted:
            why = f"{ours}: not said by the {kind} file (importing it gives {theirs})"
            out.notes.append(Problem(path, why))
    return out


# the sections a framework's file describes (the model and the machine come from elsewhere)
EXECUTION = ("training", "parallel", "placement")


def _leaves(node: object, prefix: str, out: dict[str, object]) -> dict[str, object]:
    if isinstance(node, dict):
        for key, value in node.items():
            _leaves(value, f"{prefix}{key}.", out)
    else:
        out[prefix[:-1]] = node
    return out


def read_back_differences(s: Scenario, kind: str, text: str) -> dict[str, tuple[str, str]]:
    """Execution keys (training, parallel, placement) whose value `tiersim import` of `text`,
    with `s`'s model and hardware, gives otherwise: path -> (s's value, the import's), as
    given (a framework's defaults for keys left out are not filled in on either side).
    `training.global_batch_size` is left out: given, it derives the same accumulation."""
    import tempfile
    from pathlib import Path

    from tiersim.config.document import scenario_document
    from tiersim.core.errors import InputError
    from tiersim.frameworks.assemble import ImportOptions, import_configs
    from tiersim.frameworks.mapping import as_yaml

    doc = scenario_document(s)
    sets = (f"model={as_yaml(doc['model'])}", f"hardware={as_yaml(doc['hardware'])}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"emitted.{EXTENSIONS[kind]}"
        path.write_text(text, encoding="utf-8")
        try:
            back = import_configs([path], ImportOptions(kind=kind, name=s.name, overrides=sets))
        except InputError as exc:
            return {"": ("this scenario", f"an error: {exc.problems[0].message}")}
    out = {}
    for section in EXECUTION:  # as given (a framework's defaults not filled in)
        mine = _leaves(getattr(s, section).model_dump(mode="json"), f"{section}.", {})
        got = getattr(back.loaded.scenario, section).model_dump(mode="json")
        got = _leaves(got, f"{section}.", {})
        for key, value in mine.items():
            if key != "training.global_batch_size" and got.get(key) != value:
                out[key] = (as_yaml(value), as_yaml(got.get(key)))
    return out


# --- DeepSpeed ------------------------------------------------------------------------------


def _deepspeed(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    _framework_note(s, "deepspeed", "deepspeed", notes)
    t, p, pl = s.training, s.parallel, s.placement
    for key in ("tensor", "pipeline"):
        if getattr(p, key) != 1:
            why = f"{getattr(p, key)}: a DeepSpeed config has no {key} parallelism (Megatron's)"
            notes.append(Problem(f"parallel.{key}", why))
    zero: dict[str, object] = {"stage": p.zero_stage}
    for ours, theirs in _OFFLOAD_KEYS.items():
        value = getattr(t.offload, ours)
        if value is not None:
            zero[theirs] = value
    if pl.optimizer_compute == "cpu":
        device = _DS_TIER.get(pl.optimizer)
        if device is None or pl.master != pl.optimizer:
            why = f"{pl.master} / {pl.optimizer}: DeepSpeed offloads both to cpu or nvme"
            notes.append(Problem("placement.optimizer", why))
            device = device or "cpu"
        section: dict[str, object] = {"device": device}
        if device == "nvme":
            section["nvme_path"] = "/local_nvme"
        for key in ("pin_memory", "buffer_count", "pipeline_read", "pipeline_write"):
            value = getattr(t.offload, key)
            if value is not None:
                section[key] = value
        zero["offload_optimizer"] = section
        if pl.gradients != "dram":
            why = f"{pl.gradients}: DeepSpeed's offload keeps the fp32 gradients in host memory"
            notes.append(Problem("placement.gradients", why))
    if pl.weights != "hbm":
        device = _DS_TIER.get(pl.weights, "cpu")
        section = {"device": device}
        if device == "nvme":
            section["nvme_path"] = "/local_nvme"
        zero["offload_param"] = section
    cfg: dict[str, object] = {
        "train_batch_size": global_batch(s),
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.grad_accumulation,
        "zero_optimization": zero,
    }
    precision = t.precision.weights
    if precision in ("fp16", "bf16"):
        cfg[precision] = {"enabled": True}
    if t.recompute == "full":
        cfg["activation_checkpointing"] = {"cpu_checkpointing": pl.activations == "dram"}
    elif t.recompute != "none":
        why = f"{t.recompute}: DeepSpeed's activation checkpointing is whole layers (full)"
        notes.append(Problem("training.recompute", why))
    name = _DS_OPTIMIZER.get(t.optimizer)
    if name is None:
        notes.append(Problem("training.optimizer", f"{t.optimizer}: no DeepSpeed optimizer type"))
    else:
        cfg["optimizer"] = {"type": name}
    return Emitted("deepspeed", json.dumps(cfg, indent=2) + "\n", notes)


# --- Megatron-LM ----------------------------------------------------------------------------


def _megatron_model(s: Scenario) -> list[str]:
    m = s.model
    if m.parameters is not None or m.hidden is None:
        return []
    flags = [
        f"--num-layers {m.layers}",
        f"--hidden-size {m.hidden}",
        f"--num-attention-heads {m.heads}",
        f"--ffn-hidden-size {m.ffn_hidden}",
        f"--vocab-size {m.vocab}",
        f"--normalization {'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'}",
        "--position-embedding-type "
        + {"learned": "learned_absolute", "rope": "rope", "none": "none"}[m.position],
    ]
    if m.max_positions is not None:
        flags.append(f"--max-position-embeddings {m.max_positions}")
    if m.kv_heads and m.kv_heads != m.heads:
        flags += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    if m.head_dim:
        flags.append(f"--kv-channels {m.head_dim}")
    flags += ["--swiglu"] if m.gated_mlp else []
    flags += [] if m.tied_embeddings else ["--untie-embeddings-and-output-weights"]
    if not (m.attn_out_bias or m.mlp_bias):
        flags.append("--disable-bias-linear")
        flags += ["--add-qkv-bias"] if m.qkv_bias else []
    return flags


def _megatron(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    _framework_note(s, "megatron", "megatron", notes)
    t, p, pl = s.training, s.parallel, s.placement
    flags = _megatron_model(s)
    flags += [
        f"--seq-length {s.seq_len}",
        f"--micro-batch-size {t.micro_batch_size}",
        f"--global-batch-size {global_batch(s)}",
        f"--tensor-model-parallel-size {p.tensor}",
        f"--pipeline-model-parallel-size {p.pipeline}",
    ]
    if p.virtual_pipeline > 1:
        flags.append(f"--virtual-pipeline-model-parallel-size {p.virtual_pipeline}")
    if p.expert > 1:
        flags.append(f"--expert-model-parallel-size {p.expert}")
    flags += ["--sequence-parallel"] if p.sequence else []
    if p.zero_stage == 1:
        flags.append("--use-distributed-optimizer")
    elif p.zero_stage > 1:
        why = f"{p.zero_stage}: Megatron-LM's distributed optimizer shards optimizer state (ZeRO-1)"
        notes.append(Problem("parallel.zero_stage", why))
    flags += ["--overlap-grad-reduce"] if p.overlap_gradient_reduce else []
    flags += ["--tp-comm-overlap"] if p.overlap_tensor_backward else []
    flags += _megatron_precision(s, notes)
    if t.recompute in ("full", "selective"):
        flags.append(f"--recompute-granularity {t.recompute}")
        if t.recompute == "full":
            flags += ["--recompute-method uniform", "--recompute-num-layers 1"]
    if t.attention_kernel is not None:
        flags.append(
            f"--attention-backend {'unfused' if t.attention_kernel == 'eager' else 'flash'}"
        )
    optimizer = {"adamw": "adam", "adam": "adam", "sgd_momentum": "sgd"}.get(t.optimizer)
    if optimizer is None:
        notes.append(Problem("training.optimizer", f"{t.optimizer}: Megatron has adam and sgd"))
    else:
        flags.append(f"--optimizer {optimizer}")
    if t.optimizer == "adam":  # the same two moments a parameter
        why = "adam: written as Megatron's adam, which is AdamW (decoupled weight decay)"
        notes.append(Problem("training.optimizer", why))
    for cls in ("weights", "gradients", "master", "optimizer", "activations"):
        if getattr(pl, cls) != "hbm":
            why = f"{getattr(pl, cls)}: this Megatron-LM launch keeps every class in HBM"
            notes.append(Problem(f"placement.{cls}", why))
    return Emitted("megatron", _launch_script(s, flags), notes)


def _megatron_precision(s: Scenario, notes: list[Problem]) -> list[str]:
    pr = s.training.precision
    flags: list[str] = []
    if pr.weights == "bf16":
        flags.append("--bf16")
        flags += ["--grad-reduce-in-bf16"] if pr.gradients == "bf16" else []
        expected = ("bf16", pr.gradients if pr.gradients in ("bf16", "fp32") else "fp32", "fp32")
    elif pr.weights == "fp16":
        flags.append("--fp16")
        flags += ["--accumulate-allreduce-grads-in-fp32"] if pr.gradients == "fp32" else []
        expected = ("fp16", pr.gradients if pr.gradients in ("fp16", "fp32") else "fp16", "fp32")
    else:
        expected = ("fp32", "fp32", "none")
    if (pr.weights, pr.gradients, pr.master) != expected or pr.optimizer != "fp32":
        said = f"{pr.weights}/{pr.gradients}/{pr.master}/{pr.optimizer}"
        why = (
            f"{said}: written as Megatron's {'/'.join(expected)}/fp32 "
            "(weights/gradients/master/optimizer)"
        )
        notes.append(Problem("training.precision", why))
    if pr.compute == "fp8":
        flags.append("--fp8-format hybrid")
    return flags


def _launch_script(s: Scenario, flags: list[str]) -> str:
    world = _world(s)
    per_node = min(world, s.hardware.network.gpus_per_node)
    nodes, rest = divmod(world, per_node)
    if rest:
        per_node, nodes = world, 1
    lines = [
        "#!/bin/bash",
        f"# written by tiersim from scenario {s.name}: {world} GPUs",
        f"GPUS_PER_NODE={per_node}",
        f"NUM_NODES={nodes}",
        "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\",
    ]
    lines += [f"    {flag} \\" for flag in flags[:-1]] + [f"    {flags[-1]}"]
    return "\n".join(lines) + "\n"


# --- torchtitan -----------------------------------------------------------------------------


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return f"{value}"


def _torchtitan(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    _framework_note(s, "torchtitan", "fsdp", notes)
    t, p, pl = s.training, s.parallel, s.placement
    tables: dict[str, dict[str, object]] = {}
    flavor = {preset: key for key, preset in PRESETS.items()}.get(s.model.preset)
    if flavor is None:
        given = s.model.preset or "given by dimensions"
        why = f"{given}: no torchtitan flavor (import it with --hf-config)"
        notes.append(Problem("model", why))
    else:
        tables["model"] = {"name": flavor[0], "flavor": flavor[1]}
    dtypes = {ours: theirs for theirs, ours in DTYPES.items()}
    pr = t.precision
    training: dict[str, object] = {
        "local_batch_size": t.micro_batch_size,
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
        notes.append(Problem("training.precision", why))
    offloaded = [
        c for c in ("weights", "gradients", "master", "optimizer") if getattr(pl, c) != "hbm"
    ]
    if offloaded:
        training["enable_cpu_offload"] = True
        if (
            offloaded != ["weights", "gradients", "master", "optimizer"]
            or pl.optimizer_compute != "cpu"
        ):
            notes.append(
                Problem("placement", "torchtitan's CPU offload moves every class to the host")
            )
    tables["training"] = training
    shard = p.data if p.zero_stage == 3 else 1
    if p.zero_stage in (1, 2):
        notes.append(
            Problem("parallel.zero_stage", f"{p.zero_stage}: torchtitan shards all (FSDP) or none")
        )
    tables["parallelism"] = {
        "data_parallel_replicate_degree": p.data // shard,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": p.tensor,
        "pipeline_parallel_degree": p.pipeline,
        "expert_parallel_degree": p.expert,
    }
    if p.overlap_tensor_backward:
        tables["parallelism"]["enable_async_tensor_parallel"] = True
    if t.recompute == "selective":
        notes.append(
            Problem(
                "training.recompute",
                "selective: torchtitan's selective is by op or every n-th layer; written as none",
            )
        )
    tables["activation_checkpoint"] = {
        "mode": t.recompute if t.recompute in ("none", "full") else "none"
    }
    optimizer = {"adamw": "AdamW", "adam": "Adam"}.get(t.optimizer)
    if optimizer is None:
        notes.append(
            Problem("training.optimizer", f"{t.optimizer}: torchtitan's are Adam and AdamW")
        )
    else:
        tables["optimizer"] = {"name": optimizer}
    if s.checkpoint.every_steps not in (None, "auto"):
        tables["checkpoint"] = {
            "enable_checkpoint": True,
            "interval": s.checkpoint.every_steps,
            "async_mode": "async" if s.checkpoint.mode == "async" else "disabled",
        }
    lines = [f"# written by tiersim from scenario {s.name}: {_world(s)} GPUs"]
    for name, body in tables.items():
        lines.append(f"\n[{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in body.items()]
    return Emitted("torchtitan", "\n".join(lines) + "\n", notes)
