"""`tiersim import` of configs as users write them, against each framework's own rule for what
they leave out or forbid (review 2026-12-07-f): DeepSpeed's batch rule with train_batch_size
alone, fp16 and bf16 together, offloads below the ZeRO stage that runs them; a Megatron-LM
script whose flags sit in a multi-line quoted variable; torchtitan's `[checkpoint] enable`;
a Megatron-Bridge YAML's `mixed_precision: <recipe name>`; a --set of the micro-batch on an
imported global batch; torchtitan's `[compile]` written back.

Expected values are worked out here from the files' numbers and the frameworks' sources (cited
at each), never by calling the importer for them. Imports only, no simulation: about 1 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiersim.core.errors import InputError
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.emit import emit

HF = Path(__file__).resolve().parent / "fixtures" / "llama-2-7b.config.json"


def _imported(tmp_path: Path, name: str, text: str, **options: object):
    path = tmp_path / name
    path.write_text(text)
    return import_configs([path], ImportOptions(**options))


def _ds(tmp_path: Path, config: dict, gpus: int = 8):
    return _imported(tmp_path, "ds.json", json.dumps(config), hf_config=str(HF), gpus=gpus)


def test_deepspeed_train_batch_size_alone_accumulates_once(tmp_path):
    # DeepSpeed's config.py _set_batch_related_parameters, train_batch_size alone:
    # gradient_accumulation_steps = 1, micro = train_batch_size // world size = 256 // 64 = 4
    # (it was micro 1 and 4 accumulation steps, a quarter of the activations)
    t = _ds(tmp_path, {"train_batch_size": 256}, gpus=64).loaded.scenario.training
    assert (t.micro_batch_size, t.grad_accumulation, t.global_batch_size) == (4, 1, 256)


def test_deepspeed_fp16_and_bf16_both_enabled_is_refused(tmp_path):
    # config.py: assert not (fp16 enabled and bf16 enabled), 'bfloat16 and fp16 modes cannot
    # be simultaneously enabled'; the later section used to win silently
    config = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}
    config["bf16"] = {"enabled": True}
    with pytest.raises(InputError) as caught:
        _ds(tmp_path, config)
    (problem,) = caught.value.problems
    assert (problem.path, problem.code) == ("bf16.enabled", "E-IMPORT-VALUE")
    assert "cannot be simultaneously enabled" in problem.message


def test_deepspeed_offload_below_its_stage_is_not_applied(tmp_path):
    # zero/config.py: offload_param "Valid only with stage 3"; offload_optimizer "Valid for
    # ZeRO stage 1, 2, 3"; stage defaults to 0 (ZeRO off)
    zero = {"stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}
    got = _ds(tmp_path, {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero})
    placement = got.loaded.scenario.placement
    assert (placement.weights, placement.optimizer, placement.master) == ("hbm", "dram", "dram")
    notes = "\n".join(got.note_lines())
    assert "zero_optimization.offload_param.device: not applied (placement.weights: dram" in notes
    del zero["stage"]
    got = _ds(tmp_path, {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero})
    placement = got.loaded.scenario.placement
    assert (placement.weights, placement.optimizer, placement.master) == ("hbm", "hbm", "hbm")
    assert "stage here is 0 (0 where absent)" in "\n".join(got.note_lines())


SCRIPT = """#!/bin/bash
TP=4
# the model's size (an apostrophe in a comment opens no quote)
GPT_ARGS="
    --num-layers 4 --hidden-size 1024 --num-attention-heads 16
    --seq-length 2048 --max-position-embeddings 2048
    --micro-batch-size 2 --global-batch-size 64
"
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py $GPT_ARGS \\
    --tensor-model-parallel-size $TP --sequence-parallel --bf16
"""


def test_megatron_flags_in_a_multi_line_quoted_variable(tmp_path):
    # Megatron-LM's older examples (examples/pretrain_gpt.sh) hold the flags in GPT_ARGS="..."
    # over many lines: it was "cannot split into arguments: No closing quotation"
    s = _imported(tmp_path, "train.sh", SCRIPT).loaded.scenario
    assert (s.model.layers, s.model.hidden, s.model.heads) == (4, 1024, 16)
    assert (s.parallel.tensor, s.parallel.data, s.parallel.sequence) == (4, 16 // 4, True)
    # 64 sequences = micro 2 x data 4 x accumulation 8
    assert (s.training.micro_batch_size, s.training.grad_accumulation) == (2, 8)


def test_torchtitan_checkpoint_enable_is_read(tmp_path):
    # torchtitan's job_config.py `Checkpoint.enable` (formerly `enable_checkpoint`)
    toml = '[model]\nname = "llama3"\nflavor = "8B"\n[checkpoint]\nenable = true\n'
    toml += 'interval = 250\nasync_mode = "async"\n'
    c = _imported(tmp_path, "tt.toml", toml, gpus=8).loaded.scenario.checkpoint
    assert (c.every_steps, c.mode) == (250, "async")


@pytest.mark.parametrize(
    ("recipe", "fp8"),
    [("bf16_mixed", None), ("bf16_with_fp8_delayed_scaling_mixed", "delayed")],
)
def test_bridge_yaml_mixed_precision_by_name(tmp_path, recipe, fp8):
    # ConfigContainer.mixed_precision takes a recipe's name (megatron/bridge/training/
    # mixed_precision.py): bf16 weights, fp32 master; it was noted and fp32 trained
    text = f"model:\n  tensor_model_parallel_size: 2\nmixed_precision: {recipe}\n"
    s = _imported(tmp_path, "o.yaml", text, gpus=8, hf_config=str(HF)).loaded.scenario
    p = s.training.precision
    assert (p.weights, p.master) == ("bf16", "fp32")
    assert (s.training.fp8.recipe if s.training.fp8 else None) == fp8


def test_a_set_micro_batch_keeps_the_imported_global_batch(tmp_path):
    # global 64 over data 8 (16 GPUs / tensor 2): micro 1 gives 64 / (1 x 8) = 8 steps; the
    # scenario used to keep the file's accumulation (4) and refuse the --set as a conflict
    toml = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\n'
    toml += "global_batch_size = 64\n[parallelism]\ntensor_parallel_degree = 2\n"
    got = _imported(
        tmp_path, "tt.toml", toml, gpus=16, overrides=("training.micro_batch_size=1",)
    ).loaded.scenario.training
    assert (got.micro_batch_size, got.grad_accumulation, got.global_batch_size) == (1, 8, 64)


def test_torchtitan_compile_is_written_back(tmp_path):
    toml = '[model]\nname = "llama3"\nflavor = "8B"\n[compile]\nenable = true\n'
    loaded = _imported(tmp_path, "tt.toml", toml, gpus=8).loaded
    out = emit(loaded.scenario, "torchtitan")
    assert "[compile]\nenable = true\n" in out.text
    assert not [n for n in out.notes if n.path == "training.compile"]


def test_deepspeed_pinned_parameter_offload_is_written_pinned(tmp_path):
    # offload_config.py: pin_memory defaults false in each of offload_param and
    # offload_optimizer; tiersim's one switch, true from the file, is written to both
    offload = {"device": "cpu", "pin_memory": True}
    zero = {"stage": 3, "offload_param": offload, "offload_optimizer": offload}
    loaded = _ds(tmp_path, {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}).loaded
    written = json.loads(emit(loaded.scenario, "deepspeed").text)["zero_optimization"]
    assert written["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert written["offload_optimizer"]["pin_memory"] is True


@pytest.mark.parametrize(("flag", "kernel"), [("", "eager"), ("--use-flash-attn-v2 ", "flash")])
def test_megatron_deepspeed_script_attention(tmp_path, flag, kernel):
    # Megatron-DeepSpeed has no --attention-backend: its classic attention (the scores kept)
    # unless --use-flash-attn-v2 (or -v1, -triton; its megatron/arguments.py); it was taken as
    # Megatron-LM's auto, flash
    script = (
        "deepspeed pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 "
        f"--fp16 {flag}--deepspeed --deepspeed_config ds.json\n"
    )
    s = _imported(tmp_path, "mds.sh", script, gpus=8).loaded.scenario
    assert s.training.attention_kernel == kernel


def test_an_unapplied_nvme_offloads_path_is_said_once_as_unused(tmp_path):
    # review 2026-12-07-f: the path was still noted "taken as the hardware's nvme tier" beside
    # the note that the offload (stage 0, DeepSpeed's default: no ZeRO optimizer) was not applied
    section = {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}
    lines = _ds(tmp_path, {"zero_optimization": section}).note_lines()
    assert not any("taken as the hardware's nvme tier" in line for line in lines)
    (said,) = [line for line in lines if "/x" in line]
    assert "offload_optimizer.device: not applied (" in said
    assert "; its nvme_path /x unused): DeepSpeed runs it at ZeRO stage 1, 2 or 3" in said
    # applied (stage 2), the path is noted as the nvme tier it stands for
    applied = _ds(tmp_path, {"zero_optimization": {"stage": 2, **section}}).note_lines()
    assert any("nvme_path: /x: taken as the hardware's nvme tier" in line for line in applied)


BRIDGE = """from megatron.bridge.models import AutoBridge


def pretrain_config():
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-8B").to_megatron_provider(
        load_weights=False
    )
    cfg.model.tensor_model_parallel_size = 2
    cfg.train.global_batch_size = 64
    cfg.train.micro_batch_size = 1{divisor}
    return cfg
"""


@pytest.mark.parametrize("divisor", [None, 64])
def test_bridge_hf_model_gives_one_vocab_note(tmp_path, divisor):
    # review 2026-12-07-f: "--make-vocab-size-divisible-by: absent: 128 ..." then "keeps a
    # Hugging Face model's vocab_size unpadded ...: 1"; only the second holds: Bridge's
    # GPTModelProvider pads only where should_pad_vocab (default False), so the divisor,
    # given or not, is not applied
    given = f"\n    cfg.model.make_vocab_size_divisible_by = {divisor}" if divisor else ""
    imp = _imported(tmp_path, "r.py", BRIDGE.format(divisor=given), gpus=8)
    assert imp.loaded.scenario.training.make_vocab_size_divisible_by == 1
    (said,) = [line for line in imp.note_lines() if "vocab" in line]
    assert "keeps a Hugging Face model's vocab_size unpadded" in said
    assert ("the recipe's divisor 64 is not applied" in said) == (divisor == 64)
