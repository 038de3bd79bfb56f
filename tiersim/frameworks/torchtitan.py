"""A torchtitan TOML (torchtitan/config/job_config.py) onto the scenario's keys.

torchtitan trains with FSDP2 (training.framework: fsdp): mixed precision keeps the sharded
parameters in fp32 (the master copy itself) and computes in bf16
(`mixed_precision_param`), reduces gradients in fp32 (`mixed_precision_reduce`). Data
parallelism is `data_parallel_replicate_degree` x `data_parallel_shard_degree`, the latter
-1 for "every GPU the other degrees leave" (world size from --gpus). The local batch
(`local_batch_size`, formerly `batch_size`) is each data-parallel rank's micro-batch;
`global_batch_size` (-1: local x data-parallel) sets the gradient accumulation.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import InputError, Problem
from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import ValueProblem, boolean, integer, text
from tiersim.state.optimizers import framework_names

# (model.name, model.flavor) -> the shipped model preset with those dimensions
PRESETS = {("llama3", "8B"): "llama-3-8b", ("llama3", "70B"): "llama-3-70b",
           ("llama2", "7B"): "llama-2-7b", ("llama2", "13B"): "llama-2-13b",
           ("llama2", "70B"): "llama-2-70b", ("deepseek_v3", "671B"): "deepseek-v3",
           ("qwen3", "8B"): "qwen3-8b", ("qwen3", "30B-A3B"): "qwen3-30b-a3b"}  # fmt: skip
DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
# [float8] recipe_name's values (torchtitan/config/job_config.py, Float8Linear.recipe_name:
# Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] | None; torchao's recipe names)
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
# model.converters' names of torchao's Float8Linear: "float8" configured by [float8] (the
# job config's first era, this repository's fixtures), "quantize.linear.float8" by
# [quantize.linear.float8] (the later TOML era: torchtitan's docs/float8.md runs
# `--model.converters="quantize.linear.float8" --quantize.linear.float8.enable_fsdp_float8_
# all_gather`); both read alike (review 2026-12-07-i)
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
PARALLEL_DEGREES = ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "context_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree")  # fmt: skip


def read_torchtitan(cfg: dict[str, Any], source: str, hf_config: bool) -> Mapped:
    out = Mapped("torchtitan", source)
    out.put("training.framework", "fsdp", "(torchtitan)")
    out.put("training.implementation", "torchtitan", "(torchtitan)")
    for section, body in cfg.items():
        reader = _SECTIONS.get(section)
        if reader is None or not isinstance(body, dict):
            out.unmapped(f"[{section}]", "..." if isinstance(body, dict) else body)
            continue
        reader(out, section, body, hf_config)
    _precision(out, cfg.get("training", {}))
    _fp8(out)
    if "training.loss_chunks" not in out.values:  # the TOML job config's era: no chunking
        out.put("training.loss_chunks", 1, "(torchtitan TOML: cross_entropy_loss, one piece)")
    if "training.seq_len" not in out.values:  # job_config.py Training: `seq_len: int = 2048`
        out.put("training.seq_len", 2048, "training.seq_len (default 2048)")
    if "micro" not in out.facts:  # torchtitan's default local_batch_size
        out.facts["micro"] = 8
        out.put("training.micro_batch_size", 8, "training.local_batch_size (default 8)")
    _pp_micro(out)
    return out


def _pp_micro(out: Mapped) -> None:
    """Under pipeline parallelism torchtitan splits each local batch into microbatches of
    pipeline_parallel_microbatch_size (job_config.py Parallelism, default 1: "the total number
    of microbatches by dividing local_batch_size with pipeline_parallel_microbatch_size"): the
    micro-batch the pipeline runs, local / size of them a local batch (review 2026-12-07-i: the
    local batch was taken as one micro-batch, the pipeline's bubble and in-flight activations
    those of one)."""
    given = out.facts.pop("pp_micro", None)
    size, where = given or (1, "parallelism.pipeline_parallel_microbatch_size")
    if out.values.get("parallel.pipeline", 1) <= 1:
        if given:
            out.unmapped(where, size, "no pipeline parallelism: not applied")
        return
    local = out.facts["micro"]
    if local % size:
        why = f"{size} does not divide training.local_batch_size {local} (torchtitan splits it)"
        raise ValueProblem(where, why)
    out.facts["micro"] = size
    out.put("training.micro_batch_size", size, where)
    if "global" not in out.facts:  # global_batch_size -1: local x data, one local batch a step
        out.facts["accumulation"] = local // size
        out.put("training.grad_accumulation", local // size, where)
    said = "" if given else " (default 1)"
    why = f"{size}{said}: each local batch of {local} runs as {local // size} microbatches"
    out.note(where, why)


def _model(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    name = text(f"{section}.name", body.get("name", "llama3"))
    flavor = text(f"{section}.flavor", body.get("flavor", "debugmodel"))
    for key, value in body.items():
        where = f"{section}.{key}"
        if key in ("name", "flavor"):
            continue
        if key == "converters":
            names = value if isinstance(value, list) else [value]
            if set(FLOAT8_CONVERTERS) & set(names):  # torchao's Float8Linear, set in _fp8
                out.facts["float8"] = where
            for other in (n for n in names if n not in FLOAT8_CONVERTERS):
                out.unmapped(where, other)
        else:
            out.unmapped(where, value)
    if hf_config:
        out.note(f"{section}.name", f"{name} {flavor}: the model is --hf-config's")
        return
    preset = PRESETS.get((name, flavor))
    if preset is None:
        known = ", ".join(f"{n} {f}" for n, f in PRESETS)
        why = f"{name} {flavor} has no shipped preset (known: {known}; expected --hf-config PATH)"
        raise ValueProblem(f"{section}.flavor", why)
    out.put("model.preset", preset, f"{section}.name, {section}.flavor")


def _training(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    for key, value in body.items():
        where = f"{section}.{key}"
        if key in ("local_batch_size", "batch_size"):
            out.facts["micro"] = integer(where, value)
            out.put("training.micro_batch_size", out.facts["micro"], where)
        elif key == "global_batch_size":
            total = integer(where, value, low=-1)
            if total > 0:
                out.facts["global"] = total
                out.facts["global_from"] = (out.source, where)
                out.put("training.global_batch_size", total, where)
        elif key == "seq_len":
            out.put("training.seq_len", integer(where, value), where)
        elif key == "compile":
            out.put("training.compile", boolean(where, value), where)
        elif key == "enable_cpu_offload":
            if boolean(where, value):
                for cls in ("weights", "gradients", "master", "optimizer"):
                    out.put(f"placement.{cls}", "dram", where)
                out.put("placement.optimizer_compute", "cpu", where)
        elif key in ("mixed_precision_param", "mixed_precision_reduce"):
            text(where, value, tuple(DTYPES))
        else:
            out.unmapped(where, value)


def _precision(out: Mapped, training: Any) -> None:
    """FSDP2 mixed precision: the fp32 sharded parameters are the master copy."""
    body = training if isinstance(training, dict) else {}
    param = DTYPES[body.get("mixed_precision_param", "bfloat16")]
    reduce = DTYPES[body.get("mixed_precision_reduce", "float32")]
    where = "training.mixed_precision_param"
    out.put("training.precision.weights", "fp32", where)
    out.put("training.precision.master", "none", where)
    out.put("training.precision.gradients", reduce, "training.mixed_precision_reduce")
    out.put("training.precision.compute", param, where)


def _parallelism(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    degrees = {}
    for key, value in body.items():
        where = f"{section}.{key}"
        if key in PARALLEL_DEGREES:
            degrees[key] = integer(where, value, low=-1)
            if degrees[key] == 0 or (degrees[key] == -1 and key != "data_parallel_shard_degree"):
                raise ValueProblem(where, f"is {value} (expected a whole number >= 1)")
        elif key == "fsdp_reshard_after_forward":
            mode = text(where, value, ("default", "always", "never"))
            if mode != "default":  # default: reshard except the last stage's (no PP: always)
                out.put("parallel.reshard_after_forward", mode == "always", where)
        elif key == "enable_async_tensor_parallel":
            # async TP micro-pipelines every TP collective with its GEMM, forward and backward
            # (torch._inductor's fused all-gather-matmul / matmul-reduce-scatter)
            on = boolean(where, value)
            out.put("parallel.overlap_tensor_forward", on, where)
            out.put("parallel.overlap_tensor_backward", on, where)
        elif key == "pipeline_parallel_microbatch_size":  # read with the degrees (_pp_micro)
            out.facts["pp_micro"] = (integer(where, value), where)
        elif key == "pipeline_parallel_layers_per_stage":
            out.facts["layers_per_stage"] = integer(where, value)
            out.unmapped(where, value, "layers per stage: the split tiersim makes is even")
        else:
            out.unmapped(where, value)
    _degrees(out, section, degrees)


def _degrees(out: Mapped, section: str, d: dict[str, int]) -> None:
    tp, pp = d.get("tensor_parallel_degree", 1), d.get("pipeline_parallel_degree", 1)
    cp = d.get("context_parallel_degree", 1)
    replicate, shard = (
        d.get("data_parallel_replicate_degree", 1),
        d.get("data_parallel_shard_degree", -1),
    )
    out.put("parallel.tensor", tp, f"{section}.tensor_parallel_degree")
    if tp > 1:  # torchtitan's TP is always sequence parallel: its plan (apply_tp in
        # torchtitan/models/llama3/infra/parallelize.py) gives "norm", "layers.*.attention_norm"
        # and "layers.*.ffn_norm" SequenceParallel() and wo / w2 RowwiseParallel(output_layouts=
        # Shard(1)): the norms and the residual stream are sharded on the sequence
        out.put("parallel.sequence", True, f"{section}.tensor_parallel_degree")
    out.put("parallel.pipeline", pp, f"{section}.pipeline_parallel_degree")
    if cp != 1:
        out.put("parallel.context", cp, f"{section}.context_parallel_degree")
    for key, path in (("expert_parallel_degree", "parallel.expert"),
                      ("expert_tensor_parallel_degree", "parallel.expert_tensor")):  # fmt: skip
        if key in d:
            out.put(path, d[key], f"{section}.{key}")
    out.facts.update(model_parallel=tp * pp * cp, replicate=replicate, shard=shard)


def _activation_checkpoint(
    out: Mapped, section: str, body: dict[str, Any], hf_config: bool
) -> None:
    mode = text(f"{section}.mode", body.get("mode", "selective"), ("none", "selective", "full"))
    option = str(body.get("selective_ac_option", "2"))
    where, at = f"{section}.mode", f"{section}.selective_ac_option"
    if mode != "selective":
        out.put("training.recompute", mode, where)
    elif option == "op":
        _op_sac(out, at)
    elif option.isdigit() and int(option) <= 1:
        # torchtitan's layer SAC (_apply_layer_sac, torchtitan/distributed/activation_
        # checkpoint.py) wraps a block where `not ac_freq or count % ac_freq == 0`, count
        # the blocks so far: every block for 1 and 0, full recompute on every layer
        out.put("training.recompute", "full", at)
    elif option.isdigit():  # every n-th block fully checkpointed (state/layer_sac.py)
        out.put("training.recompute", "full", at)
        out.put("training.recompute_every", int(option), at)
    else:  # torchtitan refuses any other value ("Valid options: 'op' or a positive int")
        text(at, option, ("op", "a positive whole number"))
    for key, value in body.items():
        if key not in ("mode", "selective_ac_option"):
            out.unmapped(f"{section}.{key}", value)


def _op_sac(out: Mapped, at: str) -> None:
    """torchtitan's op-level SAC (selective_ac_option "op"): each block checkpointed with a
    policy that saves the outputs of every other mm, SDPA and the reduce-scatters and
    recomputes the rest (`_apply_op_sac` in torchtitan/distributed/activation_checkpoint.py):
    tiersim's `selective_op` (tiersim/state/op_recompute.py)."""
    out.put("training.recompute", "selective_op", at)


def _float8(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    """[float8] configures the float8 converter, which runs only where model.converters names
    it (torchtitan builds the converters model.converters lists): kept for _fp8."""
    settings = out.facts.setdefault("float8_settings", {})
    for key, value in body.items():
        where = f"{section}.{key}"
        if key == "recipe_name":  # torchtitan's Literal (job_config.py, Float8Linear)
            settings["recipe"] = (text(where, value, FLOAT8_RECIPES), where)
        elif key == "enable_fsdp_float8_all_gather":  # torchao's FP8 all-gather of the shards
            settings["param_gather"] = (boolean(where, value), where)
        else:
            out.unmapped(where, value)


def _quantize(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    """[quantize.linear.float8], the later TOML era's home of [float8]'s keys (the same
    names): read as [float8]; the other quantizers (MX formats, grouped GEMMs) noted."""
    for key, value in body.items():
        where = f"{section}.{key}"
        inner = value if isinstance(value, dict) else {}
        if key != "linear" or not inner:
            out.unmapped(where, "..." if inner else value)
            continue
        for name, settings in inner.items():
            if name == "float8" and isinstance(settings, dict):
                _float8(out, f"{where}.float8", settings, hf_config)
            else:
                out.unmapped(f"{where}.{name}", "..." if isinstance(settings, dict) else settings)


def _fp8(out: Mapped) -> None:
    """training.fp8 where model.converters names float8: torchao's Float8Linear, the linears'
    GEMMs in FP8 (tensorwise unless [float8] recipe_name), the compute copy staying
    mixed_precision_param's (docs/fp8.md); [float8] enable_fsdp_float8_all_gather is
    training.fp8.param_gather (config/kernel_checks.py). Without the converter [float8] does
    nothing, and its settings are noted so."""
    settings = out.facts.get("float8_settings", {})
    if "float8" not in out.facts:
        for value, where in settings.values():
            why = (
                'not applied: model.converters does not name "float8" or '
                '"quantize.linear.float8" (FP8 off)'
            )
            out.unmapped(where, value, why)
        return
    fp8 = {key: value for key, (value, _) in settings.items()}
    parts = {f"training.fp8.{key}": where for key, (_, where) in settings.items()}
    out.put("training.fp8", {"recipe": "tensorwise"} | fp8, out.facts["float8"], parts)


# the switch's two names: `enable_checkpoint` (the TOML job config's, job_config.py `Checkpoint`:
# this repository's fixtures, and what --emit torchtitan writes) and `enable` (the config
# registry's CheckpointManager.Config since, set as --checkpoint.enable; docs/import.md)
_CHECKPOINT_SWITCH = ("enable_checkpoint", "enable")


def _checkpoint(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    enabled = any(
        boolean(f"{section}.{key}", body[key]) for key in _CHECKPOINT_SWITCH if key in body
    )
    for key, value in body.items():
        where = f"{section}.{key}"
        if key == "interval" and enabled:
            out.put("checkpoint.every_steps", integer(where, value), where)
        elif key == "async_mode" and enabled:
            mode = text(where, value, ("disabled", "async", "async_with_pinned_mem"))
            out.put("checkpoint.mode", "blocking" if mode == "disabled" else "async", where)
        elif key in _CHECKPOINT_SWITCH:
            continue
        else:
            why = (
                "checkpointing is off (enable / enable_checkpoint not true)"
                if not enabled and key in ("interval", "async_mode")
                else ""
            )
            out.unmapped(where, value, why)


def _optimizer(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    for key, value in body.items():
        where = f"{section}.{key}"
        if key == "name":
            names = {t.lower(): ours for t, ours in framework_names("torchtitan").items()}
            name = names.get(text(where, value).lower())  # the registry's (state/optimizers.py)
            if name is None:
                out.unmapped(where, value, "not mapped (torchtitan's Adam or AdamW)")
            else:
                out.put("training.optimizer", name, where)
        else:
            out.unmapped(where, value, "optimizer hyperparameters: not modelled")


def _loss(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    """ChunkedLossWrapper.Config's num_chunks (torchtitan/components/loss.py); a TOML of the
    job-config era has no [loss]: its cross_entropy_loss takes all the tokens at once."""
    for key, value in body.items():
        where = f"{section}.{key}"
        if key == "num_chunks":
            out.put("training.loss_chunks", integer(where, value), where)
        else:
            out.unmapped(where, value)


def _compile(out: Mapped, section: str, body: dict[str, Any], hf_config: bool) -> None:
    for key, value in body.items():
        where = f"{section}.{key}"
        if key == "enable":
            out.put("training.compile", boolean(where, value), where)
        else:
            out.unmapped(where, value)


_SECTIONS = {
    "model": _model,
    "training": _training,
    "parallelism": _parallelism,
    "activation_checkpoint": _activation_checkpoint,
    "float8": _float8,
    "quantize": _quantize,
    "checkpoint": _checkpoint,
    "optimizer": _optimizer,
    "compile": _compile,
    "loss": _loss,
}


def replicate_x_shard(
    facts: dict[str, Any], ranks: int | None, world: int | None, notes: list
) -> int:
    """torchtitan's data parallelism: replicate x shard, shard -1 the ranks the others leave;
    a shard degree given must fill the world with the rest, as ParallelDims asserts
    (review 2026-12-07-i: 8 x TP 2 on 32 GPUs was taken as 16 GPUs, silently)."""
    replicate, shard = facts["replicate"], facts["shard"]
    model_parallel = facts.get("model_parallel", 1)
    if shard == -1 and ranks is None:
        why = "not given: data_parallel_shard_degree -1 taken as 1 (give --gpus N, the world size)"
        notes.append(("--gpus", Problem("", why, "W-IMPORT-ASSUMED")))
        shard = 1
    elif shard == -1:
        if ranks % replicate:
            why = (
                f"{world} GPUs do not divide into data_parallel_replicate_degree "
                f"{replicate} x tensor x pipeline x context {model_parallel}"
            )
            raise InputError("--gpus", [Problem("", why, "E-IMPORT-CONFLICT")])
        shard = ranks // replicate
    elif ranks is not None and replicate * shard != ranks:
        fills = replicate * shard * model_parallel
        why = (
            f"{world} GPUs are not data_parallel_replicate_degree {replicate} x "
            f"data_parallel_shard_degree {shard} x tensor x pipeline x context {model_parallel}"
            f" = {fills} (torchtitan's ParallelDims asserts 'Invalid parallel dims: ... != "
            f"WORLD_SIZE'; expected --gpus {fills}, or data_parallel_shard_degree = -1)"
        )
        raise InputError("--gpus", [Problem("", why, "E-IMPORT-CONFLICT")])
    facts["shard"] = shard
    return replicate * shard
