"""An Accelerate config YAML (`accelerate config`'s file, `accelerate launch --config_file`)
onto the scenario's keys: its FSDP runs (`distributed_type: FSDP`) and plain DDP.

Read in accelerate 1.15.0 (PyPI): `accelerate launch` fills its arguments from the file (a
`fsdp_config` key `x` as `--fsdp_x`), a key left out taking the launcher's default
(commands/launch.py), and hands them to the training processes as `FSDP_*` variables
(utils/launch.py `prepare_multi_gpu_env`), which `FullyShardedDataParallelPlugin.__post_init__`
reads (utils/dataclasses.py). So an absent key is the launcher's default:

- `fsdp_version` "1"; under 1 the sharding is `fsdp_sharding_strategy` (default FULL_SHARD):
  the launcher always sets FSDP_SHARDING_STRATEGY, which the plugin prefers over
  `fsdp_reshard_after_forward` (accelerator.py: `sharding_strategy or reshard_after_forward`);
  under 2 it is `fsdp_reshard_after_forward` (default "true"), the strategy not read.
- `fsdp_offload_params` "false", `fsdp_activation_checkpointing` "false",
  `fsdp_activation_checkpointing_offload` "false"; `mixed_precision` "no" (fp32).
- `num_processes`: the world size (utils/launch.py: nproc_per_node = num_processes //
  num_machines); `num_machines` 1.

Mixed precision under FSDP: accelerate upcasts the trainable parameters to fp32 (the sharded
master, fsdp_utils.py `fsdp2_prepare_model`, accelerator.py for FSDP1) and sets the policy's
param_dtype and reduce_dtype to the mixed precision (dataclasses.py `set_mixed_precision`).
"""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import shown
from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import ValueProblem, integer, table, yaml_text

_VERSION = "accelerate 1.15.0"
# FSDP1's strategies (utils/constants.py FSDP_SHARDING_STRATEGY) as (sharded, reshard after
# forward, within a node); to_fsdp2.py's ARGUMENT_VALUE_MAPPING gives the reshard of each
_STRATEGIES = {
    "FULL_SHARD": (True, True, False),
    "SHARD_GRAD_OP": (True, False, False),
    "NO_SHARD": (False, False, False),
    "HYBRID_SHARD": (True, True, True),
    "HYBRID_SHARD_ZERO2": (True, False, True),
}
_PRECISIONS = ("no", "fp16", "bf16", "fp8")  # commands/launch.py --mixed_precision choices
_READ_TYPES = ("FSDP", "MULTI_GPU", "NO")
# keys that choose how a job starts or saves, not what a GPU holds or does in a step
_LAUNCH = {"compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "gpu_ids",
           "machine_rank", "main_process_ip", "main_process_port", "main_training_function",
           "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo",
           "use_cpu", "tpu_name", "tpu_zone", "commands", "command_file"}  # fmt: skip
_FSDP_NOT_MODELLED = {
    "fsdp_state_dict_type": "a checkpoint format, not modelled",
    "fsdp_cpu_ram_efficient_loading": "how the model is loaded, not the step",
    "fsdp_sync_module_states": "how the model is loaded, not the step",
    "fsdp_use_orig_params": "FSDP1's parameter views: the same bytes",
    "fsdp_transformer_layer_cls_to_wrap": "the wrapped layer (tiersim's unit is a layer)",
    "fsdp_min_num_params": "SIZE_BASED_WRAP's threshold (tiersim's unit is a layer)",
    "fsdp_backward_prefetch": "FSDP1's backward prefetch: not modelled separately",
    "fsdp_forward_prefetch": "forward prefetch: not modelled separately",
}


# utils/environment.py str_to_bool, which reads each switch the launcher passes as text
_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def _truth(key: str, value: Any) -> bool:
    """A switch as Accelerate reads it: the launcher's `str(value).lower()`, then str_to_bool."""
    said = str(value).lower() if isinstance(value, bool | int | str) else None
    if said in _TRUE or said in _FALSE:
        return said in _TRUE
    why = (
        f"is {shown(value)} (expected true or false; Accelerate's str_to_bool also takes "
        "yes/no, on/off, 1/0)"
    )
    raise ValueProblem(key, why)


def read_accelerate(cfg: dict[str, Any], source: str) -> Mapped:
    out = Mapped("accelerate", source)
    kind = yaml_text("distributed_type", cfg.get("distributed_type", "NO"))
    if kind not in _READ_TYPES:
        why = (
            f"is {kind} (expected FSDP, MULTI_GPU or NO; a DEEPSPEED run: import the DeepSpeed "
            "JSON its deepspeed_config.deepspeed_config_file names)"
        )
        raise ValueProblem("distributed_type", why)
    _implementation(out)
    _processes(out, cfg)
    _precision(out, cfg.get("mixed_precision"), kind == "FSDP")
    if kind == "FSDP":
        _fsdp(out, table("fsdp_config", cfg.get("fsdp_config") or {}))
    else:  # DDP: each GPU holds the whole model, its gradients and optimizer state
        out.put("parallel.zero_stage", 0, "distributed_type")
        out.put("training.recompute", "none", "distributed_type")
    _parallelism(out, cfg.get("parallelism_config"), kind)
    for key, value in cfg.items():
        _other(out, key, value, kind)
    return out


def _implementation(out: Mapped) -> None:
    """Accelerate runs the script's own model: a transformers one is the case its FSDP config
    is written for (TRANSFORMER_BASED_WRAP wraps a model's `_no_split_modules`;
    cpu_ram_efficient_loading is "only applicable for Transformers")."""
    out.put("training.framework", "fsdp", "(Accelerate config)")
    out.put("training.implementation", "huggingface", "(Accelerate config)")
    why = (
        "the model is the training script's: a transformers model taken (training."
        "implementation: huggingface, attention sdpa; --set training.implementation=... "
        "otherwise)"
    )
    out.note("(Accelerate config)", why)
    out.facts["batch_unsaid"] = "an Accelerate config"  # said unless --set gives it (unsaid.py)


def _processes(out: Mapped, cfg: dict[str, Any]) -> None:
    machines = integer("num_machines", cfg.get("num_machines", 1))
    out.facts["machines"] = machines
    if "num_processes" not in cfg:
        return
    world = integer("num_processes", cfg["num_processes"], low=-1)
    if world in (-1, 0):  # launch.py: "You need to manually pass in `--num_processes`"
        out.unmapped("num_processes", world, "the launch gives it (--gpus N here)")
        return
    if world % machines:
        why = (
            f"is {world}, not a multiple of num_machines {machines} (GPUs a machine; expected "
            f"a multiple of {machines}, the same number of processes on each machine)"
        )
        raise ValueProblem("num_processes", why)
    out.facts["world"] = world
    out.facts["world_from"] = out.source
    out.facts["world_said"] = "the Accelerate config's num_processes {}"
    out.facts["world_by"] = "the world size its num_processes gives"


def _precision(out: Mapped, value: Any, fsdp: bool) -> None:
    """mixed_precision (absent: "no", launch.py) under FSDP: fp32 parameters sharded (the
    master itself), computed and reduced in the mixed precision's dtype (set_mixed_precision:
    param_dtype = reduce_dtype; fp8 is bf16 there, its FP8 GEMMs the fp8_config's). Under DDP
    (MULTI_GPU, NO) the mixed precision is autocast's (accelerator.py `native_amp`): the fp32
    parameters' gradients are fp32 and all-reduced so."""
    where = "mixed_precision"
    mode = "no" if value is None else yaml_text(where, value, _PRECISIONS)
    dtype = {"no": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}[mode]
    said = where if value is not None else "mixed_precision (default no)"
    out.put("training.precision.weights", "fp32", said)
    out.put("training.precision.master", "none", said)
    out.put("training.precision.compute", dtype, said)
    if not fsdp:
        out.put("training.precision.gradients", "fp32", said)
        if mode != "no":
            why = (
                f"{mode}: autocast around the forward (DDP: no FSDP policy): the parameters "
                "and their gradients stay fp32, all-reduced in fp32 (training.precision."
                "gradients: fp32)"
            )
            out.note(where, why)
    else:
        out.put("training.precision.gradients", dtype, said)
    if (
        fsdp and mode != "no"
    ):  # FSDP2's foreach_reduce: `_to_dtype_if_needed(reduce_output, orig_dtype)`
        why = (
            f"{mode}: gradients reduced in {dtype} (training.precision.gradients: the "
            "plugin's set_mixed_precision makes the reduce dtype the mixed precision's); FSDP "
            "keeps each reduced shard in the parameters' fp32 (foreach_reduce casts it back), "
            "counted so: 4 bytes a value"
        )
        out.note(where, why)
    if mode == "fp8":
        why = (
            "FSDP's policy computes in bf16 (set_mixed_precision maps fp8 to bf16); the FP8 "
            "GEMMs of fp8_config are not read: --set training.fp8.recipe=... to model them"
        )
        out.unmapped(where, value, why)


def _fsdp(out: Mapped, body: dict[str, Any]) -> None:
    version = integer("fsdp_config.fsdp_version", body.get("fsdp_version", 1))
    if version not in (1, 2):
        raise ValueProblem("fsdp_config.fsdp_version", f"is {version} (expected 1 or 2)")
    out.facts["fsdp_version"] = version
    if version == 2:
        _reshard_fsdp2(out, body)
    else:
        _strategy_fsdp1(out, body)
    _offload(out, body, version)
    _checkpointing(out, body, version)
    _wrap(out, body)
    read = {"fsdp_version", "fsdp_reshard_after_forward", "fsdp_sharding_strategy",
            "fsdp_offload_params", "fsdp_activation_checkpointing",
            "fsdp_activation_checkpointing_offload", "fsdp_auto_wrap_policy"}  # fmt: skip
    for key, value in body.items():
        if key not in read:
            why = _FSDP_NOT_MODELLED.get(key, "")
            out.unmapped(f"fsdp_config.{key}", value, why)


def _reshard_fsdp2(out: Mapped, body: dict[str, Any]) -> None:
    """fsdp2_prepare_model passes the plugin's reshard_after_forward to every fully_shard call,
    the root's included (utils/fsdp_utils.py at 00b1b18: `fsdp2_kwargs`): an explicit value,
    so the root too reshards after forward where it is true (torch's `_lazy_init` keeps only an
    unset root whole): the key is always set, true by default."""
    where = "fsdp_config.fsdp_reshard_after_forward"
    given = where if "fsdp_reshard_after_forward" in body else f"{where} (default true)"
    reshard = _truth(where, body.get("fsdp_reshard_after_forward", True))
    out.put("parallel.zero_stage", 3, "fsdp_config.fsdp_version")
    out.put("parallel.reshard_after_forward", reshard, given)
    if "fsdp_sharding_strategy" in body:
        why = "not read under fsdp_version 2 (FSDP2's is fsdp_reshard_after_forward)"
        out.unmapped("fsdp_config.fsdp_sharding_strategy", body["fsdp_sharding_strategy"], why)


def _strategy_fsdp1(out: Mapped, body: dict[str, Any]) -> None:
    where = "fsdp_config.fsdp_sharding_strategy"
    given = where if "fsdp_sharding_strategy" in body else f"{where} (default FULL_SHARD)"
    name = yaml_text(where, body.get("fsdp_sharding_strategy", "FULL_SHARD"), tuple(_STRATEGIES))
    sharded, reshard, in_node = _STRATEGIES[name]
    out.put("parallel.zero_stage", 3 if sharded else 0, given)
    if sharded and not reshard:
        out.put("parallel.reshard_after_forward", False, given)
    if in_node:  # FSDP1's hybrid: sharded within a node, replicated across nodes
        out.facts["hybrid_from"] = given
    if "fsdp_reshard_after_forward" in body:
        value = body["fsdp_reshard_after_forward"]
        why = (
            f"not applied: under fsdp_version 1 the launcher always sets FSDP_SHARDING_STRATEGY "
            f"({name}), which the plugin uses first ({_VERSION}, accelerator.py)"
        )
        out.unmapped("fsdp_config.fsdp_reshard_after_forward", value, why)


def _offload(out: Mapped, body: dict[str, Any], version: int) -> None:
    """fsdp_offload_params: CPUOffloadPolicy (FSDP2) / CPUOffload(offload_params=True): the
    sharded parameters and gradients in host memory, the optimizer stepping them there."""
    where = "fsdp_config.fsdp_offload_params"
    if not _truth(where, body.get("fsdp_offload_params", False)):
        return
    for cls in ("weights", "gradients", "master", "optimizer"):
        out.put(f"placement.{cls}", "dram", where)
    out.put("placement.optimizer_compute", "cpu", where)


def _checkpointing(out: Mapped, body: dict[str, Any], version: int) -> None:
    """fsdp_activation_checkpointing: each wrapped layer checkpointed whole (full);
    _offload: its saved input in pinned host memory (dataclasses.py: requires
    activation_checkpointing and fsdp_version 2, else ValueError)."""
    where = "fsdp_config.fsdp_activation_checkpointing"
    on = _truth(where, body.get("fsdp_activation_checkpointing", False))
    out.put("training.recompute", "full" if on else "none", where)
    at = "fsdp_config.fsdp_activation_checkpointing_offload"
    if not _truth(at, body.get("fsdp_activation_checkpointing_offload", False)):
        return
    if not on or version != 2:
        need = "fsdp_activation_checkpointing: true" if not on else "fsdp_version: 2"
        why = (
            f"true requires {need} (Accelerate raises ValueError: `{at[12:]}=True` requires "
            f"it; expected {need} beside it, or false)"
        )
        raise ValueProblem(at, why)
    out.put("placement.activations", "dram", at)


def _wrap(out: Mapped, body: dict[str, Any]) -> None:
    """TRANSFORMER_BASED_WRAP: a unit a layer, tiersim's default. Accelerate's default, NO_WRAP,
    makes the whole model one unit (fully_shard on the root alone), gathered whole as the
    forward starts and kept to the end of the backward: training.offload.fetch: model."""
    where = "fsdp_config.fsdp_auto_wrap_policy"
    policy = yaml_text(where, body.get("fsdp_auto_wrap_policy", "NO_WRAP"))
    if policy.upper() == "TRANSFORMER_BASED_WRAP":
        return
    said = policy if "fsdp_auto_wrap_policy" in body else "NO_WRAP (default)"
    if policy.upper() == "NO_WRAP":
        out.put("training.offload.fetch", "model", where)
        why = (
            f"{said}: the whole model one FSDP unit (training.offload.fetch: model): "
            "gathered whole from the forward to the end of the backward, its gradients "
            "unsharded at once, one all-gather and one reduce-scatter a micro-batch, exposed"
        )
        out.note(where, why)
        return
    if policy.upper() != "SIZE_BASED_WRAP":  # dataclasses.py: "Invalid auto wrap policy ..."
        expected = "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP"
        raise ValueProblem(where, f"is {policy} (expected {expected})")
    out.unmapped(where, said, "units by parameter count: tiersim's unit is a layer")


_PARALLEL = {
    "parallelism_config_dp_replicate_size": "replicate",
    "parallelism_config_dp_shard_size": "shard",
    "parallelism_config_tp_size": "tensor",
    "parallelism_config_cp_size": "context",
}


def _parallelism(out: Mapped, value: Any, kind: str) -> None:
    """parallelism_config (FSDP2's ND mesh, parallelism_config.py ParallelismConfig; each
    size 1 where absent): tensor x context x replicate x shard = num_processes, as
    `_validate_accelerator` raises otherwise; FSDP shards over dp_shard (x cp)."""
    if not value:
        _hybrid(out)
        return
    body = table("parallelism_config", value)
    if kind != "FSDP" or out.facts.get("fsdp_version") != 2:  # launch.py raises ValueError
        why = "given (expected distributed_type: FSDP with fsdp_version: 2, as launch requires)"
        raise ValueProblem("parallelism_config", why)
    sizes = {name: 1 for name in _PARALLEL.values()}
    for key, val in body.items():
        where = f"parallelism_config.{key}"
        if key in _PARALLEL:
            sizes[_PARALLEL[key]] = integer(where, val)
        else:
            out.unmapped(where, val)
    _sizes(out, sizes)


def _hybrid(out: Mapped) -> None:
    """FSDP1's HYBRID_SHARD(_ZERO2) without a mesh: sharded within a node (its local world,
    num_processes / num_machines), replicated across the nodes."""
    given = out.facts.pop("hybrid_from", None)
    if given is None:
        return
    world, machines = out.facts.get("world"), out.facts["machines"]
    if world is None:
        why = "no num_processes: the node's GPUs unknown, sharded over every data rank"
        out.note(given, why)
    elif machines > 1:
        out.put("parallel.shard_group", world // machines, given)


def _sizes(out: Mapped, s: dict[str, int]) -> None:
    total = s["replicate"] * s["shard"] * s["tensor"] * s["context"]
    world = out.facts.get("world")
    key = "parallelism_config.parallelism_config_"
    if world is not None and total != world:
        why = (
            f"dp_replicate {s['replicate']} x dp_shard {s['shard']} x tp {s['tensor']} x cp "
            f"{s['context']} = {total}, not num_processes {world} (Accelerate raises "
            "'ParallelismConfig total_size ... does not match num_processes'; expected sizes "
            f"whose product is {world})"
        )
        raise ValueProblem("parallelism_config", why)
    if s["shard"] == 1 and s["context"] == 1:
        why = (
            "is 1 beside cp_size 1 (Accelerate raises 'FSDP is enabled but the parallelism "
            "config has no dimension for FSDP to shard across'; expected dp_shard_size or "
            "cp_size over 1)"
        )
        raise ValueProblem(f"{key}dp_shard_size", why)
    if s["tensor"] > 1:
        out.put("parallel.tensor", s["tensor"], f"{key}tp_size")
    if s["context"] > 1:
        out.put("parallel.context", s["context"], f"{key}cp_size")
    out.facts["model_parallel"] = s["tensor"] * s["context"]
    if s["replicate"] > 1:  # HSDP: sharded within groups of dp_shard
        out.put("parallel.shard_group", s["shard"], f"{key}dp_shard_size")


def _other(out: Mapped, key: str, value: Any, kind: str) -> None:
    """The top-level keys not read above: each noted."""
    if key in ("distributed_type", "mixed_precision", "fsdp_config", "num_processes",
               "num_machines", "parallelism_config"):  # fmt: skip
        return
    if key == "dynamo_config":
        _dynamo(out, table(key, value))
    elif key in _LAUNCH:
        out.unmapped(key, value, "a launcher setting: no effect on the step")
    elif key == "deepspeed_config" and kind != "DEEPSPEED":
        out.unmapped(key, "...", f"not read: distributed_type is {kind}")
    else:
        out.unmapped(key, "..." if isinstance(value, dict) else value)


def _dynamo(out: Mapped, body: dict[str, Any]) -> None:
    """dynamo_config.dynamo_backend: torch.compile with that backend (NO: eager)."""
    for sub, val in body.items():
        where = f"dynamo_config.{sub}"
        if sub == "dynamo_backend":
            backend = yaml_text(where, val).upper()
            out.put("training.compile", backend == "INDUCTOR", where)
            if backend not in ("NO", "INDUCTOR"):
                out.note(where, f"{val}: a backend other than inductor, taken as eager")
        else:
            out.unmapped(where, val)
