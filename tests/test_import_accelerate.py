"""`tiersim import` of an Accelerate config YAML (issue 39, review 2026-12-07-i: refused as an
unknown format). Two real files from huggingface/accelerate's examples (tests/fixtures/
frameworks/SOURCES.md) and written ones. The expected values are Accelerate's own rules, read
in accelerate 1.15.0 (PyPI) and worked out by hand here:

- commands/launch.py: a key the file leaves out takes the launcher's default (`--fsdp_version`
  "1", `--fsdp_sharding_strategy` "FULL_SHARD", `--fsdp_reshard_after_forward` "true",
  `--fsdp_offload_params` / `--fsdp_activation_checkpointing` "false"; `mixed_precision` "no");
  utils/launch.py always sets FSDP_SHARDING_STRATEGY, which FullyShardedDataParallelPlugin
  (utils/dataclasses.py) uses under FSDP1 before `reshard_after_forward`;
- utils/launch.py: `nproc_per_node = num_processes // num_machines`: num_processes is the world;
- fsdp_utils.py / accelerator.py: under a mixed precision the parameters are upcast to fp32 (the
  sharded master), computed and reduced in the mixed precision (`set_mixed_precision`);
- parallelism_config.py: replicate x shard x tp x cp must be num_processes.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import yaml

from tiersim.frameworks.accelerate import read_accelerate
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.values import ValueProblem

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frameworks"
MODEL = ("model.preset=llama-3-8b", "training.seq_len=4096")


def _import(path: Path, **options: object):
    options.setdefault("overrides", MODEL)
    return import_configs([path], ImportOptions(**options))


def _written(tmp_path: Path, cfg: dict, **options: object):
    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return _import(path, **options)


def _notes(imported) -> str:
    return "\n".join(imported.note_lines())


def test_accelerate_fsdp1_template_is_fully_sharded_mixed_precision():
    # examples/config_yaml_templates/fsdp.yaml: no fsdp_version (FSDP1), FULL_SHARD,
    # mixed_precision 'bf16', num_processes 2
    imp = _import(FIXTURES / "accelerate_fsdp.yaml")
    s = imp.loaded.scenario
    assert (s.training.framework, s.training.implementation) == ("fsdp", "huggingface")
    assert (s.parallel.zero_stage, s.parallel.data) == (3, 2)  # 2 GPUs, nothing else
    assert s.parallel.reshard_after_forward is None  # FULL_SHARD: resharded (the default)
    p = s.training.precision
    # fp32 sharded parameters (the master itself), bf16 compute, bf16 reduce_dtype
    assert (p.weights, p.master, p.compute, p.gradients) == ("fp32", "none", "bf16", "bf16")
    assert s.training.recompute == "none"  # fsdp_activation_checkpointing: false
    notes = _notes(imp)
    said = ("fsdp_backward_prefetch: BACKWARD_PRE", "fsdp_sync_module_states: true",
            "fsdp_use_orig_params: true", "fsdp_state_dict_type: SHARDED_STATE_DICT")  # fmt: skip
    for key in said:
        assert f"fsdp_config.{key}: " in notes
    assert "FSDP keeps each reduced shard in the parameters' fp32" in notes


def test_accelerate_fsdp2_tensor_parallel_hsdp_example():
    # examples/torch_native_parallelism/configs/tp_hsdp.yaml: 8 processes = dp_replicate 2 x
    # dp_shard 2 x tp 2 x cp 1
    s = _import(FIXTURES / "accelerate_tp_hsdp.yaml").loaded.scenario
    assert (s.parallel.tensor, s.parallel.context) == (2, 1)
    assert s.parallel.data == 8 // 2  # the world over tp: replicate 2 x shard 2
    assert (s.parallel.zero_stage, s.parallel.shard_group) == (3, 2)  # HSDP: shard within 2
    assert s.parallel.reshard_after_forward is True  # given to every fully_shard, the root's


def test_accelerate_fsdp2_offload_checkpointing_fp16_on_two_nodes(tmp_path):
    cfg = {
        "distributed_type": "FSDP",
        "mixed_precision": "fp16",
        "num_machines": 2,
        "num_processes": 16,
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": False,
            "fsdp_offload_params": True,
            "fsdp_activation_checkpointing": True,
            "fsdp_activation_checkpointing_offload": True,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_sharding_strategy": "FULL_SHARD",
        },
    }
    imp = _written(tmp_path, cfg)
    s = imp.loaded.scenario
    assert (s.parallel.zero_stage, s.parallel.data) == (3, 16)
    assert s.parallel.reshard_after_forward is False
    pl = s.placement
    # CPUOffloadPolicy: sharded parameters and gradients on the host, the optimizer there
    assert (pl.weights, pl.gradients, pl.master, pl.optimizer) == ("dram",) * 4
    assert pl.optimizer_compute == "cpu" and pl.activations == "dram"
    assert s.training.recompute == "full" and s.training.precision.compute == "fp16"
    # FSDP2 reads no sharding strategy: noted, not applied
    assert "fsdp_sharding_strategy: FULL_SHARD: not read under fsdp_version 2" in _notes(imp)


def test_accelerate_fsdp2_reshard_is_passed_to_every_fully_shard(tmp_path):
    # fsdp_utils.py `fsdp2_prepare_model` (accelerate at 00b1b18) passes the plugin's
    # reshard_after_forward (the launcher's default "true") to every fully_shard, the root's
    # included: an explicit value, which torch 2.13 leaves to the root (_fully_shard.py 246,
    # _fsdp_state.py 203-207), so the key is set, not left to the root's auto default
    cfg = {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2}}
    imp = _written(tmp_path, cfg)
    assert imp.loaded.scenario.parallel.reshard_after_forward is True
    assert imp.loaded.scenario.training.offload.fetch == "model"  # NO_WRAP: the root alone
    cfg["fsdp_config"]["fsdp_reshard_after_forward"] = "false"
    assert _written(tmp_path, cfg).loaded.scenario.parallel.reshard_after_forward is False
    # FSDP1 never reshards its root after forward: the key stays unset under version 1
    cfg = {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 1}}
    assert _written(tmp_path, cfg).loaded.scenario.parallel.reshard_after_forward is None


def test_accelerate_absent_keys_take_the_launchers_defaults(tmp_path):
    imp = _written(tmp_path, {"distributed_type": "FSDP", "num_processes": 8})
    s = imp.loaded.scenario
    assert (s.parallel.zero_stage, s.parallel.data) == (3, 8)  # FSDP1, FULL_SHARD
    p = s.training.precision  # mixed_precision "no": fp32 throughout
    assert (p.weights, p.gradients, p.compute, p.master) == ("fp32", "fp32", "fp32", "none")
    assert s.training.recompute == "none" and s.placement.weights == "hbm"
    # the plugin's auto_wrap_policy default NO_WRAP: one unit, the whole model gathered
    assert "fsdp_config.fsdp_auto_wrap_policy: NO_WRAP (default): the whole model" in _notes(imp)
    assert s.training.offload.fetch == "model"  # FSDP2's one unit (state/fsdp2_memory.py)
    # an Accelerate config has no batch: said, unless a --set gives it
    assert "training.micro_batch_size: no config gives it (an Accelerate config" in _notes(imp)
    imp = _written(
        tmp_path, {"distributed_type": "FSDP"}, overrides=(*MODEL, "training.micro_batch_size=2")
    )
    assert "training.micro_batch_size: no config" not in _notes(imp)


@pytest.mark.parametrize(
    ("strategy", "zero", "reshard", "group"),
    [
        ("SHARD_GRAD_OP", 3, False, None),  # gathered from forward to backward
        ("NO_SHARD", 0, None, None),  # DDP
        ("HYBRID_SHARD", 3, None, 16 // 2),  # within a node: 16 processes on 2 machines
        ("HYBRID_SHARD_ZERO2", 3, False, 8),
    ],
)
def test_accelerate_fsdp1_sharding_strategies(tmp_path, strategy, zero, reshard, group):
    cfg = {"distributed_type": "FSDP", "num_processes": 16, "num_machines": 2,
           "fsdp_config": {"fsdp_sharding_strategy": strategy}}  # fmt: skip
    s = _written(tmp_path, cfg).loaded.scenario
    assert (s.parallel.zero_stage, s.parallel.reshard_after_forward) == (zero, reshard)
    assert s.parallel.shard_group == group and s.parallel.data == 16


def test_accelerate_fsdp1_reshard_key_is_not_what_runs(tmp_path):
    # `accelerate config` writes FSDP1's strategy as fsdp_reshard_after_forward, but the
    # launcher's FSDP_SHARDING_STRATEGY (default FULL_SHARD) is what the plugin uses
    fsdp = {"fsdp_version": 1, "fsdp_reshard_after_forward": "SHARD_GRAD_OP"}
    cfg = {"distributed_type": "FSDP", "num_processes": 8, "fsdp_config": fsdp}
    imp = _written(tmp_path, cfg)
    assert imp.loaded.scenario.parallel.reshard_after_forward is None  # FULL_SHARD
    assert "fsdp_reshard_after_forward: SHARD_GRAD_OP: not applied" in _notes(imp)


def test_accelerate_switches_read_as_its_str_to_bool(tmp_path):
    # the launcher passes str(value).lower(); utils/environment.py str_to_bool takes yes / on / 1
    fsdp = {"fsdp_offload_params": "yes", "fsdp_activation_checkpointing": 1}
    s = _written(tmp_path, {"distributed_type": "FSDP", "fsdp_config": fsdp}).loaded.scenario
    assert (s.placement.weights, s.training.recompute) == ("dram", "full")


def test_accelerate_ddp_and_compile(tmp_path):
    cfg = {"distributed_type": "MULTI_GPU", "num_processes": 4, "mixed_precision": "bf16",
           "dynamo_config": {"dynamo_backend": "INDUCTOR"}}  # fmt: skip
    s = _written(tmp_path, cfg).loaded.scenario
    assert (s.parallel.zero_stage, s.parallel.data, s.training.compile) == (0, 4, True)


def test_accelerate_gpus_wins_over_num_processes(tmp_path):
    imp = _written(tmp_path, {"distributed_type": "FSDP", "num_processes": 8}, gpus=32)
    assert imp.loaded.scenario.parallel.data == 32
    assert "--gpus: 32 replaces" in _notes(imp)


@pytest.mark.parametrize(
    ("cfg", "key", "why"),
    [
        ({"distributed_type": "DEEPSPEED"}, "distributed_type", "import the DeepSpeed JSON"),
        ({"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 3}},
         "fsdp_config.fsdp_version", "expected 1 or 2"),
        ({"distributed_type": "FSDP", "fsdp_config": {"fsdp_offload_params": "maybe"}},
         "fsdp_config.fsdp_offload_params", "expected true or false"),
        ({"distributed_type": "FSDP", "mixed_precision": "fp64"}, "mixed_precision",
         "expected one of no, fp16, bf16, fp8"),
        ({"distributed_type": "FSDP",
          "fsdp_config": {"fsdp_version": 2, "fsdp_activation_checkpointing_offload": True}},
         "fsdp_config.fsdp_activation_checkpointing_offload",
         "requires fsdp_activation_checkpointing: true"),
        ({"distributed_type": "FSDP", "num_processes": 8, "fsdp_config": {"fsdp_version": 2},
          "parallelism_config": {"parallelism_config_tp_size": 2,
                                 "parallelism_config_dp_shard_size": 2}},
         "parallelism_config", "= 4, not num_processes 8"),
        ({"distributed_type": "FSDP", "num_processes": 4,
          "parallelism_config": {"parallelism_config_dp_shard_size": 4}},
         "parallelism_config", "fsdp_version: 2"),
        ({"distributed_type": "FSDP", "num_processes": 4, "fsdp_config": {"fsdp_version": 2},
          "parallelism_config": {"parallelism_config_tp_size": 4}},
         "parallelism_config.parallelism_config_dp_shard_size", "no dimension for FSDP"),
        ({"distributed_type": "FSDP", "num_processes": 10, "num_machines": 4},
         "num_processes", "not a multiple of num_machines 4"),
        ({"distributed_type": "FSDP", "fsdp_config": {"fsdp_auto_wrap_policy": "LAYER"}},
         "fsdp_config.fsdp_auto_wrap_policy", "expected TRANSFORMER_BASED_WRAP"),
    ],
)  # fmt: skip
def test_accelerate_bad_values_exit_2_naming_file_and_key(cli, tmp_path, cfg, key, why):
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, _, err = cli("import", path, "--set", "model.preset=gpt2")
    assert code == 2
    assert err.startswith(f"{path}: {key}: ") and why in err and "Traceback" not in err


def test_accelerate_is_recognised_or_named(cli, tmp_path):
    path = tmp_path / "conf.yaml"
    path.write_text("distributed_type: FSDP\nnum_processes: 2\n")
    code, out, err = cli("import", path, "--set", "model.preset=gpt2")
    assert code == 0 and "framework: fsdp" in out, err
    path.write_text("- 1\n")  # named with --from, not a mapping
    code, _, err = cli("import", path, "--from", "accelerate", "--set", "model.preset=gpt2")
    assert code == 2 and "not a mapping of keys" in err and "--from accelerate" in err


def test_any_value_at_any_key_is_refused_or_read(tmp_path):
    """Every key of the real HSDP example set to each wrong kind of value: refused at its key
    (ValueProblem, exit 2 once imported) or read, never another exception: the reader alone
    (a whole import of each of the 35 x 8 cases, through a YAML file, took 4 s)."""
    cfg = yaml.safe_load((FIXTURES / "accelerate_tp_hsdp.yaml").read_text())
    values = [None, [], {"a": 1}, "x", -1, 0, 1.5, True]
    paths = [(k,) for k in cfg] + [(k, sub) for k, v in cfg.items() if isinstance(v, dict)
                                   for sub in v]  # fmt: skip
    for path in paths:
        for value in values:
            changed = copy.deepcopy(cfg)
            node = changed if len(path) == 1 else changed[path[0]]
            node[path[-1]] = value
            with contextlib.suppress(ValueProblem):
                read_accelerate(changed, "x.yaml")
