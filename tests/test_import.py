"""`tiersim import`: real configuration files from DeepSpeed's, Megatron-LM's and torchtitan's
own repositories (tests/fixtures/frameworks/SOURCES.md) read into scenarios that run; every
key mapped or named in a note; malformed input refused with exit 2, the file and the key.

Expected values are worked out here by hand from the files' own numbers and each framework's
documented rule, never by calling the importer for them."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from tiersim.core.errors import InputError
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.mapping import accepts, as_yaml
from tiersim.runner import report_for
from tiersim.state.resolved import resolve

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frameworks"


def _import(name: str, **options: object):
    return import_configs([FIXTURES / name], ImportOptions(**options))


def _notes(imported) -> str:
    return "\n".join(imported.note_lines())


def _pending_or_set(imported, path: str, value: object) -> None:
    """A third-round key: set where this version's schema takes it, else a note with it."""
    node = imported.raw
    for key in path.split(".")[:-1]:
        node = node.get(key, {})
    if accepts(path, value) and path.split(".")[-1] in node:
        assert node[path.split(".")[-1]] == value
    elif accepts(path, value):  # the schema takes it, but not for this scenario: said why
        assert f"not modelled for this scenario by this version: {path}: " in _notes(imported)
    else:
        said = f"not yet modelled by this version: {path}: {as_yaml(value)} (left out)"
        assert said in _notes(imported)


# --- DeepSpeed --------------------------------------------------------------------------------


def test_zero_infinity_config_maps_offload_devices_buckets_and_precision():
    imp = _import("ds_zero_stage_infinity_config.json", gpus=16, overrides=("model.preset=gpt2",))
    s = imp.loaded.scenario
    assert s.training.framework == "deepspeed"
    assert s.parallel.zero_stage == 3
    # offload_param.device nvme -> weights on nvme; offload_optimizer.device nvme -> master and
    # Adam moments on nvme, updated by the CPU optimizer
    assert (s.placement.weights, s.placement.master, s.placement.optimizer) == ("nvme",) * 3
    assert s.placement.optimizer_compute == "cpu"
    off = s.training.offload
    assert off.prefetch_bucket_size == 50_000_000  # "stage3_prefetch_bucket_size": 5e7
    assert off.max_live_parameters == 1_000_000_000  # 1e9
    assert off.sub_group_size == 100_000_000  # 1e8
    assert off.reduce_bucket_size == 90_000_000
    assert (off.buffer_count, off.pipeline_read, off.pipeline_write) == (4, False, False)
    assert off.pin_memory is True and off.overlap_comm is True
    assert s.training.precision.weights == "fp16" and s.training.precision.master == "fp32"
    assert s.training.micro_batch_size == 4 and s.training.grad_accumulation == 1
    assert s.parallel.data == 16  # --gpus 16, no tensor or pipeline parallelism
    notes = _notes(imp)
    assert "zero_optimization.offload_optimizer.nvme_path: /nvme_data" in notes
    assert "aio: {block_size: 1048576" in notes  # a whole section named with its values
    assert "gradient_clipping: 1.0" in notes


def test_deepspeed_batch_rule_gives_the_micro_batch_or_refuses_what_does_not_divide():
    # train_batch_size 30 = micro x gradient_accumulation_steps 3 x data: with 10 GPUs, micro 1
    imp = _import("ds_zero-offload_10B_config.json", gpus=10, overrides=("model.preset=gpt2",))
    t = imp.loaded.scenario.training
    assert (t.micro_batch_size, t.grad_accumulation) == (1, 3)
    assert imp.loaded.scenario.placement.optimizer_compute == "cpu"  # "cpu_offload": true
    assert imp.loaded.scenario.placement.activations == "dram"  # "cpu_checkpointing": true
    # 16 x 1 = 16 sequences on 8 GPUs: micro-batch 2
    imp = _import("ds_zero2_cpu_offload_config.json", gpus=8, overrides=("model.preset=gpt2",))
    assert imp.loaded.scenario.training.micro_batch_size == 2
    # 30 / (3 x 16) is not whole
    with pytest.raises(InputError) as caught:
        _import("ds_zero-offload_10B_config.json", gpus=16, overrides=("model.preset=gpt2",))
    assert caught.value.problems[0].path == "train_batch_size"
    assert "expected a multiple of 48" in str(caught.value)  # 3 x 16


def test_every_deepspeed_key_is_mapped_or_named_in_a_note():
    raw = json.loads((FIXTURES / "ds_zero_stage_infinity_config.json").read_text())
    imp = _import("ds_zero_stage_infinity_config.json", gpus=16, overrides=("model.preset=gpt2",))
    from tiersim.frameworks.deepspeed import read_deepspeed

    mapped = read_deepspeed(raw, "x")
    said = {k for v in mapped.sources.values() for k in v.split(", ")}
    said |= {p.path for p in mapped.notes}
    leaves = []

    def walk(node, prefix):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and path != "aio":
                walk(value, path + ".")
            else:
                leaves.append(path)

    walk(raw, "")
    missing = [k for k in leaves if k not in said and k.rpartition(".")[0] + ".device" not in said]
    # every leaf: a scenario key's source, a note, or a device key's section read whole
    assert [k for k in missing if not k.endswith(".device")] == []
    assert imp.notes  # and the notes reach the caller


# --- Megatron-LM ------------------------------------------------------------------------------


def test_megatron_gpt3_175b_script_gives_its_model_and_3d_parallelism():
    imp = _import("train_gpt3_175b_distributed.sh", gpus=1536)
    s = imp.loaded.scenario
    m = s.model
    assert (m.layers, m.hidden, m.heads) == (96, 12288, 96)
    assert m.ffn_hidden == 4 * 12288  # Megatron's default ffn_hidden_size
    # the tokenizer's 50,257 (GPT-2); no --make-vocab-size-divisible-by: framework megatron's
    # 128, so resolved it is padded to a multiple of 128 x tensor 8 = 1,024: 50 x 1,024
    assert m.vocab == 50_257 and s.training.make_vocab_size_divisible_by is None
    assert resolve(s).model.vocab == 51_200
    assert m.tied_embeddings and m.qkv_bias and m.norm == "layernorm" and m.position == "learned"
    assert (s.parallel.tensor, s.parallel.pipeline) == (8, 16)
    assert s.parallel.data == 1536 // (8 * 16)  # 12
    # --global-batch-size 1536 = micro 1 x accumulation x data 12: accumulation 128
    assert s.training.grad_accumulation == 1536 // 12
    assert s.training.precision.weights == "fp16"  # --fp16
    assert s.parallel.overlap_gradient_reduce is False  # no --overlap-grad-reduce
    notes = _notes(imp)
    assert "--lr: 6.0e-5" in notes and "--rampup-batch-size: 16 16 5859375" in notes
    assert "1536 replaces the script's world size 8" in notes  # torchrun --nproc_per_node 8
    _pending_or_set(imp, "training.global_batch_size", 1536)
    # "--attention-backend auto": Transformer Engine picks flash or fused attention
    assert s.training.attention_kernel == "flash"
    report = report_for(imp.loaded)
    assert report["model"]["parameters"] > 1.7e11 and report["step"]["time_s"] > 0


def test_megatron_llama3_8b_fp8_script_reads_variables_quoted_arrays_and_both_branches():
    imp = _import("train_llama3_8b_h100_fp8.sh")
    s = imp.loaded.scenario
    # GPUS_PER_NODE=8, NUM_NODES=1 -> torchrun's world 8; TP_SIZE=1, CP_SIZE=1: data 8
    assert s.parallel.data == 8
    assert s.training.grad_accumulation == 128 // (1 * 8)  # GLOBAL_BATCH_SIZE=128
    assert s.training.seq_len == 8192  # SEQ_LENGTH=8192 through $SEQ_LENGTH
    assert (s.model.layers, s.model.kv_heads, s.model.ffn_hidden) == (32, 8, 14336)
    assert s.model.gated_mlp and not s.model.tied_embeddings and not s.model.mlp_bias
    assert s.model.vocab == 128_256  # already a multiple of 128
    # --bf16 with --grad-reduce-in-bf16; "--fp8-format hybrid" inside a quoted array entry
    assert s.training.precision.gradients == "bf16"
    # FP8 is training.fp8 alone (TE's FP8 linears): the compute copy stays the bf16 weights
    assert s.training.precision.compute is None and s.training.precision.compute_precision == "bf16"
    assert s.parallel.zero_stage == 1 and s.parallel.overlap_gradient_reduce  # DDP_ARGS
    assert s.parallel.sequence
    notes = _notes(imp)
    assert "has conditions (if)" in notes
    assert "--overlap-param-gather" in notes
    # "--fp8-param-gather" in the FP8 branch (tests/test_loss_fusion.py)
    _pending_or_set(imp, "training.fp8", {"recipe": "delayed", "param_gather": True})
    _pending_or_set(imp, "parallel.context", 1)
    assert report_for(imp.loaded)["step"]["time_s"] > 0


def test_hf_config_wins_over_megatron_model_flags():
    hf = Path(__file__).parent / "fixtures" / "llama-3-8b.config.json"
    imp = _import("train_llama3_8b_h100_fp8.sh", hf_config=str(hf))
    assert imp.loaded.scenario.model.norm == "rmsnorm"  # config.json's, not the script's
    assert "the model is --hf-config's" in _notes(imp)


# --- torchtitan -------------------------------------------------------------------------------


def test_torchtitan_llama3_8b_on_64_gpus():
    imp = _import("llama3_8b.toml", gpus=64, hardware="dgx-a100")
    s = imp.loaded.scenario
    assert s.model.preset == "llama-3-8b"  # [model] name llama3, flavor 8B
    assert s.training.framework == "fsdp" and s.parallel.zero_stage == 3
    assert s.parallel.data == 64  # data_parallel_shard_degree -1: all 64 GPUs
    assert (s.training.micro_batch_size, s.training.seq_len) == (1, 8192)
    # FSDP2 mixed precision: fp32 sharded parameters are the master copy, bf16 compute
    p = s.training.precision
    assert (p.weights, p.master, p.compute, p.gradients) == ("fp32", "none", "bf16", "fp32")
    # mode 'selective', selective_ac_option 'op': torchtitan's op-level policy, selective_op,
    # with no note of an approximation
    assert s.training.recompute == "selective_op"
    assert "selective_ac_option" not in _notes(imp)
    assert s.parallel.tensor == 1 and s.parallel.sequence is False  # no TP: no SP
    _pending_or_set(imp, "training.compile", False)
    assert "checkpoint.interval: 500: checkpointing is off" in _notes(imp)
    assert report_for(imp.loaded)["step"]["time_s"] > 0


def test_torchtitan_float8_is_training_fp8_with_the_bf16_compute_copy(tmp_path):
    # converters = ["float8"]: torchao's Float8Linear, the linears' GEMMs in FP8 (tensorwise);
    # the compute copy stays mixed_precision_param's bf16, not fp8 (docs/fp8.md)
    text = (FIXTURES / "llama3_8b.toml").read_text()
    text = text.replace('# converters = "float8"', 'converters = ["float8"]')
    path = tmp_path / "llama3_8b_float8.toml"
    path.write_text(text)
    s = import_configs([path], ImportOptions(gpus=64, hardware="dgx-h100")).loaded.scenario
    assert s.training.fp8 is not None and s.training.fp8.recipe == "tensorwise"
    assert s.training.precision.compute == "bf16"


def test_torchtitan_llama3_70b_tensor_parallel_and_full_recompute():
    imp = _import("llama3_70b.toml", gpus=64, hardware="dgx-a100")
    s = imp.loaded.scenario
    assert s.parallel.tensor == 8 and s.parallel.data == 64 // 8
    assert s.training.recompute == "full" and s.training.micro_batch_size == 8
    # tensor_parallel_degree 8: torchtitan's TP plan gives the norms SequenceParallel() and
    # the row-parallel outputs Shard(1) (apply_tp, torchtitan/models/llama3/infra/parallelize.py)
    assert s.parallel.sequence is True
    assert report_for(imp.loaded)["step"]["time_s"] > 0


TITAN_8B = '[model]\nname = "llama3"\nflavor = "8B"\n'


@pytest.mark.parametrize(
    ("body", "recompute", "every"),
    [
        # torchtitan checkpoints the blocks where (count so far) % n == 0: n = 1 is every block
        ('mode = "selective"\nselective_ac_option = "1"', "full", None),
        # n = 2: every second block checkpointed whole, the others keeping all they save
        ('mode = "selective"\nselective_ac_option = "2"', "full", 2),
        ('mode = "selective"\nselective_ac_option = 4', "full", 4),
        ("", "full", 2),  # torchtitan's defaults: selective, "2"
        ('mode = "full"', "full", None),
        ('mode = "none"', "none", None),
    ],
)
def test_torchtitan_layer_selective_checkpointing_is_every_nth_layer(
    tmp_path, body, recompute, every
):
    toml = tmp_path / "t.toml"
    toml.write_text(TITAN_8B + f"[activation_checkpoint]\n{body}\n")
    imp = import_configs([toml], ImportOptions(gpus=8))
    t = imp.loaded.scenario.training
    assert (t.recompute, t.recompute_every) == (recompute, every)
    assert "selective_ac_option" not in _notes(imp)


def test_torchtitan_sequence_parallel_only_with_tensor_parallel(tmp_path):
    for tp, sequence in ((1, False), (2, True)):
        toml = tmp_path / f"tp{tp}.toml"
        toml.write_text(TITAN_8B + f"[parallelism]\ntensor_parallel_degree = {tp}\n")
        s = import_configs([toml], ImportOptions(gpus=8)).loaded.scenario
        assert (s.parallel.tensor, s.parallel.sequence) == (tp, sequence)


def test_torchtitan_hsdp_shard_group_and_world_checks(tmp_path):
    toml = tmp_path / "hsdp.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\n'
        "global_batch_size = 64\nseq_len = 4096\n[parallelism]\n"
        "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
    )
    imp = import_configs([toml], ImportOptions(gpus=16))
    s = imp.loaded.scenario
    assert s.parallel.data == 16  # replicate 2 x shard 8
    assert s.training.grad_accumulation == 64 // (2 * 16)  # global / (local x data) = 2
    _pending_or_set(imp, "parallel.shard_group", 8)
    with pytest.raises(InputError, match="data-parallel sizes that divide it"):
        import_configs([toml], ImportOptions(gpus=24))  # 64 / (2 x 24) is not whole


# --- the command, malformed input -------------------------------------------------------------


def test_import_then_run_from_the_command_line(cli, tmp_path):
    out = tmp_path / "s.yaml"
    code, _, err = cli(
        "import", FIXTURES / "llama3_70b.toml", "--gpus", "64", "--hardware", "dgx-a100",
        "--out", out,
    )  # fmt: skip
    assert code == 0, err
    assert "note: " in err and "# what the import could not map" in out.read_text()
    code, stdout, err = cli("run", out, "--format", "json", "--out", tmp_path / "r")
    assert code == 0, err
    assert json.loads(stdout)["step"]["time_s"] > 0


@pytest.mark.parametrize(
    ("name", "text", "kind", "key", "why"),
    [
        (
            "bad.json",
            '{"zero_optimization": {"stage": 5}}',
            None,
            "zero_optimization.stage",
            "expected 0, 1, 2 or 3",
        ),
        (
            "bad2.json",
            '{"train_micro_batch_size_per_gpu": "four"}',
            None,
            "train_micro_batch_size_per_gpu",
            "expected a whole number",
        ),
        (
            "bad3.json",
            '{"fp16": {"enabled": "yes"}}',
            None,
            "fp16.enabled",
            "expected true or false",
        ),
        ("twice.json", '{"fp16": {}, "fp16": {}}', None, "", "given twice"),
        ("broken.json", '{"fp16": ', None, "", "not valid JSON"),
        ("broken.toml", "[training\nseq_len = 1", "torchtitan", "", "not valid TOML"),
        (
            "t.toml",
            '[parallelism]\ntensor_parallel_degree = 0\n[model]\nname="llama3"\nflavor="8B"',
            None,
            "parallelism.tensor_parallel_degree",
            "expected a whole number >= 1",
        ),
        (
            "t2.toml",
            '[model]\nname = "gpt5"\nflavor = "huge"\n',
            None,
            "model.flavor",
            "no shipped preset",
        ),
        (
            "t3.toml",
            TITAN_8B + '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "x"',
            None,
            "activation_checkpoint.selective_ac_option",
            "expected one of op, a positive whole number",
        ),
        (
            "m.sh",
            "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --recompute-granularity some",
            None,
            "--recompute-granularity",
            "expected one of full, selective",
        ),
        (
            "m2.sh",
            "--num-layers $LAYERS --hidden-size 64",
            None,
            "--num-layers",
            "which the script does not set",
        ),
        ("q.sh", "--num-layers 2 --split '99,1", None, "line 1", "cannot split"),
        ("x.txt", "hello world", None, "", "cannot tell which framework"),
    ],
)
def test_malformed_input_exits_2_naming_file_and_key(cli, tmp_path, name, text, kind, key, why):
    path = tmp_path / name
    path.write_text(text)
    args = ["import", path, "--set", "model.preset=gpt2"] + (["--from", kind] if kind else [])
    code, _, err = cli(*args)
    assert code == 2
    assert err.startswith(f"{path}: {key}: " if key else f"{path}: ")
    assert why in err and "Traceback" not in err


def test_reads_are_bounded_and_special_files_refused(cli, tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_text("{" + " " * 5000 + "}")
    monkeypatch.setenv("TIERSIM_MAX_JSON_BYTES", "1000")
    code, _, err = cli("import", big)
    assert code == 2 and "is larger than" in err
    code, _, err = cli("import", tmp_path)
    assert code == 2 and "is a folder" in err
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = cli("import", fifo)
    assert code == 2 and "FIFO" in err


def test_no_model_says_how_to_give_one(cli):
    code, _, err = cli("import", FIXTURES / "ds_zero_stage_infinity_config.json")
    assert code == 2 and "--hf-config PATH" in err and "model.preset" in err
    # nothing disagrees: a model is missing, and the code says so
    assert err.strip().endswith("[E-IMPORT-MISSING]"), err


def test_megatron_bridge_override_yaml_names_its_own_keys():
    imp = _import(
        "llama3_8b_pretrain_override_example.yaml", gpus=64, overrides=("model.preset=llama-3-8b",)
    )
    s = imp.loaded.scenario
    assert (s.parallel.tensor, s.parallel.pipeline) == (2, 2)
    assert s.parallel.data == 64 // (2 * 2)  # 16
    # global_batch_size 256 = micro 4 x accumulation x data 16: accumulation 4
    assert (s.training.micro_batch_size, s.training.grad_accumulation) == (4, 4)
    notes = _notes(imp)
    assert "optimizer_config.lr: 0.00025" in notes and "rng_config.seed: 42" in notes
    assert "not the recipe's it overrides" in notes
    assert report_for(imp.loaded)["step"]["time_s"] > 0


@pytest.mark.parametrize("kind", ["deepspeed", "torchtitan"])
def test_any_value_at_any_key_is_an_input_error_or_a_scenario(kind, tmp_path):
    """Every key of a real config set to each wrong kind of value: refused as InputError (exit
    2) or imported, never another exception (a traceback)."""
    import tomllib

    name = "ds_zero_stage_infinity_config.json" if kind == "deepspeed" else "llama3_70b.toml"
    text = (FIXTURES / name).read_text()
    cfg = json.loads(text) if kind == "deepspeed" else tomllib.loads(text)
    values = [None, [], {"a": 1}, "x", -1, 0, 1.5, True, 10**30]

    def paths(node, prefix=()):
        for key, value in node.items():
            yield (*prefix, key)
            if isinstance(value, dict):
                yield from paths(value, (*prefix, key))

    for path in paths(cfg):
        for value in values:
            if value is None and kind == "torchtitan":
                continue  # TOML has no null
            changed = json.loads(json.dumps(cfg))
            node = changed
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            target = tmp_path / ("x.json" if kind == "deepspeed" else "x.toml")
            target.write_text(json.dumps(changed) if kind == "deepspeed" else _toml(changed))
            options = ImportOptions(kind=kind, gpus=64, overrides=("model.preset=gpt2",))
            with contextlib.suppress(InputError):
                import_configs([target], options)


def _toml(cfg: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v) if isinstance(v, str) else f"{v}"

    lines = [f"{k} = {value(v)}" for k, v in cfg.items() if not isinstance(v, dict)]
    for section, body in cfg.items():
        if isinstance(body, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def test_deepspeed_config_beside_a_hugging_face_config_json():
    hf = Path(__file__).parent / "fixtures" / "llama-2-7b.config.json"
    imp = _import("ds_zero_stage_infinity_config.json", hf_config=str(hf), gpus=8)
    s = imp.loaded.scenario
    assert s.model.hf_config == str(hf.resolve()) and s.model.layers == 32
    assert s.placement.master == "nvme" and s.parallel.data == 8
    assert report_for(imp.loaded)["model"]["parameters"] == 6_738_415_616  # Llama-2-7B


def test_files_merge_a_later_value_winning_with_a_note(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
        "--max-position-embeddings 512 --micro-batch-size 2 --bf16\n"
    )
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}')
    imp = import_configs([script, ds], ImportOptions(gpus=4))
    s = imp.loaded.scenario
    assert s.training.micro_batch_size == 4  # the DeepSpeed config's, read last
    assert s.parallel.zero_stage == 2 and s.training.framework == "deepspeed"
    assert "training.micro_batch_size: 4 replaces 2" in _notes(imp)


def test_megatron_uneven_stages_experts_and_recompute_modules(tmp_path):
    script = tmp_path / "moe.sh"
    script.write_text(
        "NUM_LAYERS=32\n"
        "ARGS=(\n  --num-layers ${NUM_LAYERS}\n  --hidden-size 512 --num-attention-heads 8\n"
        "  --seq-length 1024 --max-position-embeddings 1024\n"
        "  --pipeline-model-parallel-size 4\n"
        "  --decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 6\n"
        "  --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2\n"
        "  --recompute-granularity selective --recompute-modules core_attn mlp\n)\n"
    )
    imp = import_configs([script], ImportOptions(gpus=16))
    s = imp.loaded.scenario
    assert (s.model.experts, s.model.experts_per_token, s.parallel.expert) == (8, 2, 2)
    assert s.parallel.data == 16 // 4 and s.training.recompute == "selective"
    # 32 layers: 6 first, 6 last, the 20 between over the 2 middle stages, 10 each
    _pending_or_set(imp, "parallel.stage_layers", [6, 10, 10, 6])
    _pending_or_set(imp, "training.recompute_modules", ["core_attn", "mlp"])


@pytest.mark.parametrize(
    ("flags", "kernel"),
    [
        ("", "flash"),  # absent: Megatron-LM's default, AttnBackend.auto
        ("--attention-backend auto", "flash"),
        ("--attention-backend flash", "flash"),
        ("--attention-backend fused", "flash"),  # cuDNN's fused attention: no stored scores
        ("--attention-backend unfused", "eager"),  # TE's unfused: the softmax kept
        ("--attention-backend local", "eager"),  # Megatron's own DotProductAttention
        ("--transformer-impl local", "eager"),  # auto, but the local spec has no TE attention
        ("--transformer-impl transformer_engine", "flash"),
    ],
)
def test_megatron_attention_backend(tmp_path, flags, kernel):
    script = tmp_path / "run.sh"
    script.write_text(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 512 "
        f"--max-position-embeddings 512 {flags}\n"
    )
    imp = import_configs([script], ImportOptions(gpus=1))
    assert imp.loaded.scenario.training.attention_kernel == kernel
    if not flags:
        assert "--attention-backend: absent: Megatron-LM's default, auto" in _notes(imp)
    if "transformer_engine" in flags:  # read only to rule out the local spec: still noted
        assert "--transformer-impl: transformer_engine: not mapped" in _notes(imp)


def test_megatron_attention_backend_outside_its_choices_exits_2(cli, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                      "--attention-backend magic\n")  # fmt: skip
    code, _, err = cli("import", script, "--set", "model.preset=gpt2")
    assert code == 2 and err.startswith(f"{script}: --attention-backend: ")
    assert "expected one of flash, fused, auto, unfused, local" in err


def test_a_large_script_is_held_to_the_yaml_bound(cli, tmp_path, monkeypatch):
    script = tmp_path / "big.sh"
    script.write_text("--num-layers 2 " * 200)  # 3,000 bytes
    monkeypatch.setenv("TIERSIM_MAX_YAML_BYTES", "1000")
    code, _, err = cli("import", script)
    assert code == 2 and "larger than 1,000 bytes" in err and "TIERSIM_MAX_YAML_BYTES" in err


def test_out_never_writes_over_a_config_read(cli, tmp_path):
    config = tmp_path / "ds.json"
    text = '{"train_micro_batch_size_per_gpu": 1}'
    config.write_text(text)
    code, _, err = cli("import", config, "--set", "model.preset=gpt2", "--out", config)
    assert code == 2 and "is one of the configs read" in err
    assert config.read_text() == text


def test_deepspeed_gradient_accumulation_dtype(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text('{"data_types": {"grad_accum_dtype": "fp32"}, "bf16": {"enabled": true}}')
    p = import_configs([config], ImportOptions(overrides=("model.preset=gpt2",)))
    precision = p.loaded.scenario.training.precision
    assert (precision.weights, precision.gradients, precision.master) == ("bf16", "fp32", "fp32")
    config.write_text('{"data_types": {"grad_accum_dtype": "int4"}}')
    with pytest.raises(InputError, match=r"data_types\.grad_accum_dtype"):
        import_configs([config], ImportOptions(overrides=("model.preset=gpt2",)))


@pytest.mark.parametrize(
    ("flags", "forward", "backward"),
    [
        # Megatron-LM's arguments.py: --tp-comm-overlap overlaps the forward's TP collectives
        # inside their GEMMs (TE userbuffers); the backward all-reduce beside the weight-gradient
        # GEMM is the default, switched off only by the old --no-async-... flag
        ("--tensor-model-parallel-size 2", None, None),
        ("--tensor-model-parallel-size 2 --tp-comm-overlap", True, None),
        ("--tensor-model-parallel-size 2 --no-async-tensor-model-parallel-allreduce", None, False),
    ],
)
def test_megatron_tensor_parallel_overlap_flags(tmp_path, flags, forward, backward):
    script = tmp_path / "run.sh"
    script.write_text(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 512 "
        f"--max-position-embeddings 512 {flags}\n"
    )
    parallel = import_configs([script], ImportOptions(gpus=2)).loaded.scenario.parallel
    assert (parallel.overlap_tensor_forward, parallel.overlap_tensor_backward) == (
        forward,
        backward,
    )


def test_torchtitan_async_tensor_parallel_overlaps_both_directions(tmp_path):
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n'
        "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"
    )
    parallel = import_configs([cfg], ImportOptions(gpus=2)).loaded.scenario.parallel
    assert parallel.overlap_tensor_forward is True
    assert parallel.overlap_tensor_backward is True


# --- Megatron-Bridge Python recipes -----------------------------------------------------------
# The shape of Megatron-Bridge's flattened recipes (src/megatron/bridge/recipes/llama/llama3.py
# at 0d5f5558: `cfg = _pretrain_common()`, then `cfg.<section>.<key> = value` statements),
# written here for the test with two recipe functions; tiersim reads it without running it.
BRIDGE_RECIPE = '''
import torch

from megatron.bridge import AutoBridge
from megatron.bridge.recipes.common import _pretrain_common
from megatron.bridge.recipes.utils.tokenizer_utils import DEFAULT_NULL_TOKENIZER_VOCAB_SIZE

SEQUENCE_LENGTH_16K: int = 16384


def small_pretrain_config():
    """TP=1."""
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-8B").to_megatron_provider(
        load_weights=False
    )
    cfg.model.tensor_model_parallel_size = 1
    cfg.train.global_batch_size = 512
    cfg.train.micro_batch_size = 1
    cfg.model.seq_length = 8192
    return cfg


def long_pretrain_config():
    """TP=4, PP=2, CP=2, SP."""
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-8B").to_megatron_provider(
        load_weights=False
    )
    cfg.tokenizer.vocab_size = DEFAULT_NULL_TOKENIZER_VOCAB_SIZE
    cfg.model.tensor_model_parallel_size = 4
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.pipeline_dtype = torch.bfloat16
    cfg.model.context_parallel_size = 2
    cfg.model.sequence_parallel = True
    cfg.model.seq_length = SEQUENCE_LENGTH_16K
    cfg.model.recompute_granularity = "full"
    cfg.model.recompute_method = "uniform"
    cfg.model.recompute_num_layers = 1
    cfg.train.global_batch_size = 128
    cfg.train.micro_batch_size = 1
    cfg.mixed_precision = "bf16_with_fp8_current_scaling_mixed"
    cfg.ddp.overlap_grad_reduce = True
    cfg.ddp.use_distributed_optimizer = True
    if cfg.model.seq_length > 8192:
        cfg.model.cp_comm_type = "a2a"
    return cfg
'''


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "llama3.py"
    path.write_text(BRIDGE_RECIPE)
    return path


def test_bridge_python_recipe_is_read_without_running_it(tmp_path):
    imp = import_configs([_recipe(tmp_path)], ImportOptions(gpus=64, recipe="long_pretrain_config"))
    s = imp.loaded.scenario
    assert (
        s.model.preset == "llama-3-8b"
    )  # AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-8B")
    assert (s.parallel.tensor, s.parallel.pipeline, s.parallel.context) == (4, 2, 2)
    assert s.parallel.data == 64 // (4 * 2 * 2)  # 4
    assert s.parallel.sequence is True and s.parallel.zero_stage == 1
    assert s.seq_len == 16384  # SEQUENCE_LENGTH_16K, the module's constant
    # global 128 = micro 1 x accumulation x data 4: accumulation 32
    assert (s.training.micro_batch_size, s.training.grad_accumulation) == (1, 32)
    assert s.training.recompute == "full"
    # bf16_with_fp8_current_scaling_mixed: bf16 compute copy, TE's FP8 linears (training.fp8)
    assert (
        s.training.precision.compute_precision == "bf16" and s.training.fp8.recipe == "tensorwise"
    )
    notes = _notes(imp)
    # the condition and the imported constant are named with their lines, not dropped
    assert "line 45: if cfg.model.seq_length > 8192: a condition (neither branch read)" in notes
    assert "DEFAULT_NULL_TOKENIZER_VOCAB_SIZE: its value is computed" in notes
    assert report_for(imp.loaded)["step"]["time_s"] > 0


def test_bridge_recipe_function_must_be_named_when_the_file_holds_several(cli, tmp_path):
    path = _recipe(tmp_path)
    code, _, err = cli("import", path, "--gpus", "8")
    assert code == 2
    assert "holds 2 recipe functions" in err and "long_pretrain_config" in err
    code, _, err = cli("import", path, "--gpus", "8", "--recipe", "nope")
    assert code == 2 and "has no function 'nope'" in err
    code, out, err = cli("import", path, "--gpus", "8", "--recipe", "small_pretrain_config")
    assert code == 0, err
    assert "preset: llama-3-8b" in out


def test_bridge_recipe_that_is_not_python_exits_2(cli, tmp_path):
    path = tmp_path / "r.py"
    path.write_text("def a_pretrain_config(:\n    cfg.model.x = 1\n")
    code, _, err = cli("import", path)
    assert code == 2 and "not valid Python (line 1" in err


def test_a_setting_read_with_an_assumption_is_not_called_unmapped(tmp_path):
    # a note on a key that was mapped (Megatron's default attention backend, taken as flash)
    # carried W-IMPORT-UNMAPPED, the code of what is left out of the scenario
    script = tmp_path / "run.sh"
    script.write_text(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 512 "
        "--max-position-embeddings 512 --foo 1\n"
    )
    lines = import_configs([script], ImportOptions(gpus=1)).note_lines()
    (assumed,) = [ln for ln in lines if "--attention-backend: absent" in ln]
    assert assumed.endswith("[W-IMPORT-ASSUMED]")
    (left_out,) = [ln for ln in lines if "--foo" in ln]
    assert left_out.endswith("[W-IMPORT-UNMAPPED]")


def test_a_script_world_size_that_does_not_divide_names_the_file_and_the_fix(cli):
    # the GPT-3 175B script's torchrun flags give 8 GPUs (GPUS_PER_NODE 8, NUM_NODES 1) for
    # tensor 8 x pipeline 16 = 128-way model parallelism: the message named "(world size)" only
    path = FIXTURES / "train_gpt3_175b_distributed.sh"
    code, _, err = cli("import", path)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{path}: 8 GPUs, the world size its torchrun flags give")
    assert "e.g. --gpus 128) [E-IMPORT-CONFLICT]" in line


def test_a_key_left_out_for_this_scenario_names_its_file_once(tmp_path):
    # torchtitan's float8 converter maps to training.fp8, which this scenario's A100 (no FP8
    # peak) does not take: the note read "FILE: FILE: KEY: ..." (it was compile.enable's,
    # until torchtitan's layer took training.compile)
    text = (FIXTURES / "llama3_70b.toml").read_text()
    path = tmp_path / "llama3_70b.toml"
    path.write_text(text.replace('# converters = ["float8"]', 'converters = ["float8"]'))
    imp = import_configs([path], ImportOptions(gpus=64, hardware="dgx-a100"))
    (line,) = [ln for ln in imp.note_lines() if "model.converters" in ln]
    assert line.startswith(f"note: {path}: model.converters: not modelled for this scenario")


def test_a_key_left_out_is_not_raised_beside_another_problem(tmp_path):
    # llama3_8b.toml's `compile = false` maps to training.compile, left out with a note for
    # implementation torchtitan; with [loss] num_chunks 3, which does not divide the
    # micro-batch's 8192 tokens (8192 = 2^13), only the chunks are the user's problem: the
    # compile key used to be raised beside it as an [E-KERNEL] error
    path = tmp_path / "llama3_8b.toml"
    path.write_text((FIXTURES / "llama3_8b.toml").read_text() + "\n[loss]\nnum_chunks = 3\n")
    with pytest.raises(InputError) as err:
        import_configs([path], ImportOptions(gpus=8))
    (problem,) = err.value.problems
    assert problem.path == "training.loss_chunks" and problem.code == "E-VALUE"
    assert err.value.source == str(path) and "(from loss.num_chunks)" in problem.message
