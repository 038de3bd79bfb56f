"""`tiersim import` / `--emit` of configs as a training engineer has them (review 2026-12-07-i):
torchtitan's later `[quantize.linear.float8]` float8 section, a torchtitan HSDP layout written
back, DeepSpeed's AutoTP (`tensor_parallel.autotp_size`) and ZeRO-Offload++'s `ratio`, an HF
Trainer config (`"auto"` values) whose model is a transformers one, a Megatron-LM tokenizer's
vocabulary given by `--set model.vocab`, and the sequence length no config gives.

Expected values are worked out here from the files' numbers and the frameworks' sources (cited
at each), never by calling the importer for them. Imports and emits only: about 1 s."""

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


def _ds(tmp_path: Path, config: dict, gpus: int = 8, **options: object):
    text = json.dumps(config)
    return _imported(tmp_path, "ds.json", text, hf_config=str(HF), gpus=gpus, **options)


def _notes(got) -> str:
    return "\n".join(got.note_lines())


TT_QUANTIZE = """[model]
name = "llama3"
flavor = "8B"
converters = ["CONVERTER"]

[training]
local_batch_size = 1
seq_len = 8192

[parallelism]
data_parallel_shard_degree = -1

[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true

[quantize.linear.mx]
recipe_name = "mxfp8_cublas"
"""


@pytest.mark.parametrize("converter", ["quantize.linear.float8", "float8"])
def test_torchtitan_quantize_linear_float8_is_read_as_float8(tmp_path, converter):
    # torchtitan's docs/float8.md, its `quantize` era: `--model.converters=
    # "quantize.linear.float8" --quantize.linear.float8.enable_fsdp_float8_all_gather` (the
    # TOML's [quantize.linear.float8], [float8]'s keys under a new home); the converter was
    # noted "not mapped" and the section "[quantize]: ...: not mapped": bf16, no FP8 all-gather
    text = TT_QUANTIZE.replace("CONVERTER", converter)
    got = _imported(tmp_path, "tt.toml", text, gpus=8)
    fp8 = got.loaded.scenario.training.fp8
    assert fp8 is not None and (fp8.recipe, fp8.param_gather) == ("tensorwise", True)
    notes = _notes(got)
    # what is not modelled is still named, at its full key path
    assert "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp: true" in notes
    assert "quantize.linear.mx: ...: not mapped" in notes


def test_torchtitan_quantize_section_without_its_converter_is_not_applied(tmp_path):
    text = TT_QUANTIZE.replace('converters = ["CONVERTER"]\n', "")
    got = _imported(tmp_path, "tt.toml", text, gpus=8)
    assert got.loaded.scenario.training.fp8 is None
    assert "quantize.linear.float8.enable_fsdp_float8_all_gather: true: not applied" in _notes(got)


def test_torchtitan_hsdp_is_written_back_as_replicate_x_shard(tmp_path):
    # data_parallel_replicate_degree 2 x data_parallel_shard_degree -1 over 32 GPUs / TP 2:
    # shard = 32 / 2 / 2 = 8, data = 2 x 8 = 16; the writer wrote replicate 1 x shard 16
    # (parameters sharded over 16, not 8) with "parallel.shard_group: 8: not said"
    text = TT_QUANTIZE.replace(
        "data_parallel_shard_degree = -1",
        "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
        "tensor_parallel_degree = 2",
    )
    s = _imported(tmp_path, "tt.toml", text, gpus=32).loaded.scenario
    assert (s.parallel.data, s.parallel.shard_group, s.parallel.zero_stage) == (16, 8, 3)
    emitted = emit(s, "torchtitan")
    assert "data_parallel_replicate_degree = 2\n" in emitted.text
    assert "data_parallel_shard_degree = 8\n" in emitted.text
    assert not [n for n in emitted.notes if n.path == "parallel.shard_group"]
    back = _imported(tmp_path, "back.toml", emitted.text, gpus=32).loaded.scenario
    assert (back.parallel.data, back.parallel.shard_group) == (16, 8)


def test_deepspeed_autotp_size_is_tensor_parallelism(tmp_path):
    # DeepSpeed's TPTrainingConfig.autotp_size (runtime/tensor_parallel/config.py, 0:
    # disabled) and its AutoTP training tutorial's config ("tensor_parallel": {"autotp_size":
    # 4}); transformers' Trainer: dp_world_size = world_size // autotp_size. 16 GPUs / 4 = 4
    # data ranks (it was "not mapped": tensor 1, data 16, the weights counted 4x per GPU)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4}
    config |= {"zero_optimization": {"stage": 2}, "tensor_parallel": {"autotp_size": 4}}
    s = _ds(tmp_path, config, gpus=16).loaded.scenario
    assert (s.parallel.tensor, s.parallel.data) == (4, 16 // 4)
    # written back as AutoTP, not noted as a tensor parallelism DeepSpeed lacks
    emitted = emit(s, "deepspeed")
    assert json.loads(emitted.text)["tensor_parallel"] == {"autotp_size": 4}
    assert not [n for n in emitted.notes if n.path == "parallel.tensor"]
    # 0, the default, is off: every GPU a data rank
    config["tensor_parallel"] = {"autotp_size": 0}
    s = _ds(tmp_path, config, gpus=16).loaded.scenario
    assert (s.parallel.tensor, s.parallel.data) == (1, 16)


def test_deepspeed_offload_ratio_below_one_is_said(tmp_path):
    # offload_config.py: ratio = Field(1.0, ge=0.0, le=1.0), "Percentage of offloaded
    # optimizer states to CPU Adam": 0.3 keeps 70 % on the GPU; tiersim homes a class whole,
    # and the note said only "not mapped (tiersim has no setting for it)"
    offload = {"device": "cpu", "ratio": 0.3}
    config = {"train_micro_batch_size_per_gpu": 1}
    config["zero_optimization"] = {"stage": 3, "offload_optimizer": offload}
    notes = _notes(_ds(tmp_path, config))
    assert "offload_optimizer.ratio: 0.3: ZeRO-Offload++ offloads 30% of" in notes
    assert "the other 70% under-counted on HBM" in notes
    offload["ratio"] = 1.5  # outside DeepSpeed's le=1.0
    with pytest.raises(InputError) as caught:
        _ds(tmp_path, config)
    (problem,) = caught.value.problems
    assert (problem.path, problem.code) == (
        "zero_optimization.offload_optimizer.ratio",
        "E-IMPORT-VALUE",
    )
    assert "expected a fraction from 0 to 1" in problem.message


def test_hf_trainer_config_models_a_transformers_model(tmp_path):
    # "auto" is filled by transformers' HfTrainerDeepSpeedConfig alone, so the model is a
    # transformers one (its default attn_implementation sdpa); the import gave the megatron
    # accounting, eager attention's stored scores (79 % of a Llama 3 8B import's activations)
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}
    got = _ds(tmp_path, config)
    assert got.loaded.scenario.training.implementation == "huggingface"
    assert "training.implementation: huggingface" in _notes(got)
    # a config with no "auto" says nothing of its model's code: the scenario's default
    config["train_micro_batch_size_per_gpu"] = 1
    raw = _ds(tmp_path, config).raw
    assert "implementation" not in raw["training"]


MEGATRON_HF_TOKENIZER = """torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 2 --hidden-size 256 --num-attention-heads 4 \\
    --seq-length 512 --max-position-embeddings 512 \\
    --micro-batch-size 1 --global-batch-size 8 --bf16 \\
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B
"""


def test_megatron_tokenizer_vocab_given_by_set(tmp_path):
    # the refusal asked for --vocab-size or --hf-config and refused --set model.vocab=N too,
    # the scenario's own key (--set "overrides a value of the scenario written")
    got = _imported(tmp_path, "train.sh", MEGATRON_HF_TOKENIZER, overrides=("model.vocab=128256",))
    assert got.loaded.scenario.model.vocab == 128256
    with pytest.raises(InputError) as caught:
        _imported(tmp_path, "train.sh", MEGATRON_HF_TOKENIZER)
    (problem,) = caught.value.problems
    assert problem.path == "--vocab-size" and "--set model.vocab=N" in problem.message
    assert caught.value.source.endswith("train.sh")


def test_the_sequence_length_no_config_gives(tmp_path):
    # a DeepSpeed config has no sequence length: the scenario's default (the model's
    # max_positions) is now said, not silently taken
    got = _ds(tmp_path, {"train_micro_batch_size_per_gpu": 1})
    assert "training.seq_len: no config gives it" in _notes(got)
    got = _ds(tmp_path, {"train_micro_batch_size_per_gpu": 1}, overrides=("training.seq_len=4096",))
    assert "training.seq_len" not in _notes(got)
    # torchtitan's job_config.py Training: `seq_len: int = 2048` where the TOML gives none
    # (it was the model's max_positions, llama3 8B's 8192: four times the tokens)
    text = TT_QUANTIZE.replace("seq_len = 8192\n", "")
    s = _imported(tmp_path, "tt.toml", text, gpus=8).loaded.scenario
    assert s.training.seq_len == 2048


def test_torchtitan_context_parallelism_is_written_back(tmp_path):
    # torchtitan's Parallelism.context_parallel_degree (job_config.py); the writer left it out
    # ("parallel.context: 2: not said by the torchtitan file"): 32 GPUs / (TP 2 x CP 2) = 8
    text = TT_QUANTIZE.replace(
        "data_parallel_shard_degree = -1",
        "data_parallel_shard_degree = -1\ntensor_parallel_degree = 2\ncontext_parallel_degree = 2",
    )
    s = _imported(tmp_path, "tt.toml", text, gpus=32).loaded.scenario
    assert (s.parallel.context, s.parallel.data) == (2, 32 // (2 * 2))
    emitted = emit(s, "torchtitan")
    assert "context_parallel_degree = 2\n" in emitted.text
    assert not [n for n in emitted.notes if n.path == "parallel.context"]
    back = _imported(tmp_path, "back.toml", emitted.text, gpus=32).loaded.scenario
    assert (back.parallel.context, back.parallel.data) == (2, 8)


MEGATRON_CP = """torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
    --num-layers 2 --hidden-size 256 --num-attention-heads 4 --vocab-size 32000 \\
    --seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope \\
    --micro-batch-size 1 --global-batch-size 16 --bf16 \\
    --tensor-model-parallel-size 2 --context-parallel-size 2 \\
    --attention-dropout 0.0 --hidden-dropout 0.0
"""


def test_megatron_context_parallelism_and_dropouts_are_written_back(tmp_path):
    # 8 x 2 = 16 GPUs / (TP 2 x CP 2) = 4 data ranks; the writer dropped
    # --context-parallel-size (its header said "8 GPUs", NUM_NODES=1) and the dropouts, so the
    # script ran Megatron-LM's default 0.1 each (arguments.py), its masks kept for backward
    s = _imported(tmp_path, "train.sh", MEGATRON_CP).loaded.scenario
    assert (s.parallel.context, s.parallel.data) == (2, 16 // (2 * 2))
    emitted = emit(s, "megatron")
    assert "# written by tiersim from scenario train: 16 GPUs" in emitted.text
    assert "NUM_NODES=2\n" in emitted.text  # 16 GPUs / dgx-h100's 8 a node
    for flag in ("--context-parallel-size 2", "--attention-dropout 0.0", "--hidden-dropout 0.0"):
        assert emitted.text.count(f"    {flag} \\\n") == 1  # written, and once
    back = _imported(tmp_path, "back.sh", emitted.text).loaded.scenario
    assert (back.parallel.context, back.parallel.data) == (2, 4)
    assert (back.model.attention_dropout, back.model.hidden_dropout) == (0.0, 0.0)


def test_deepspeed_bfloat16_section_is_bf16(tmp_path):
    # DeepSpeed's runtime/config.py get_bfloat16_enabled: `for key in [BFLOAT16,
    # BFLOAT16_OLD]` ("bf16", then "bfloat16"); "bfloat16" was "not mapped": fp32 training,
    # twice the weight bytes and no fp32 master
    config = {"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": True}}
    p = _ds(tmp_path, config).loaded.scenario.training.precision
    assert (p.weights, p.gradients, p.master) == ("bf16", "bf16", "fp32")
    # the HF Trainer fills "bf16.enabled" only: an "auto" here is read by DeepSpeed as given
    config["bfloat16"] = {"enabled": "auto"}
    with pytest.raises(InputError) as caught:
        _ds(tmp_path, config)
    (problem,) = caught.value.problems
    assert (problem.path, problem.code) == ("bfloat16.enabled", "E-IMPORT-VALUE")


def test_torchtitan_shard_degree_that_leaves_gpus_idle_is_refused(tmp_path):
    # torchtitan's ParallelDims: assert dp_replicate * dp_shard * cp * tp * pp == world_size
    # ("Invalid parallel dims"); 1 x 8 x TP 2 = 16 on --gpus 32 was taken as a 16-GPU run
    text = TT_QUANTIZE.replace(
        "data_parallel_shard_degree = -1",
        "data_parallel_shard_degree = 8\ntensor_parallel_degree = 2",
    )
    with pytest.raises(InputError) as caught:
        _imported(tmp_path, "tt.toml", text, gpus=32)
    (problem,) = caught.value.problems
    assert caught.value.source == "--gpus" and problem.code == "E-IMPORT-CONFLICT"
    assert "= 16" in problem.message and "expected --gpus 16" in problem.message
    s = _imported(tmp_path, "tt.toml", text, gpus=16).loaded.scenario
    assert (s.parallel.data, s.parallel.tensor) == (8, 2)


FSDP2_SCRIPT = """torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 2 --hidden-size 256 --num-attention-heads 4 --vocab-size 32000 \\
    --seq-length 512 --max-position-embeddings 512 \\
    --micro-batch-size 1 --global-batch-size 8 --bf16 --use-torch-fsdp2 --ckpt-format torch_dist
"""


def test_megatron_torch_fsdp2_is_zero_3(tmp_path):
    # Megatron-LM's --use-torch-fsdp2 (arguments.py; training.py: DP = torch_FSDP): the model
    # fully sharded over the data ranks, ZeRO-3; it was "not mapped" and the run taken as DDP
    # (every GPU holding all the weights, gradients and optimizer state)
    s = _imported(tmp_path, "train.sh", FSDP2_SCRIPT).loaded.scenario
    assert (s.parallel.zero_stage, s.parallel.data) == (3, 8)
    emitted = emit(s, "megatron")
    assert "    --use-torch-fsdp2 \\\n" in emitted.text
    assert not [n for n in emitted.notes if n.path == "parallel.zero_stage"]
    # arguments.py: assert args.pipeline_model_parallel_size == 1, '--use-torch-fsdp2 is not
    # supported with pipeline parallelism' (and with expert parallelism, the distributed optimizer)
    piped = FSDP2_SCRIPT.replace(
        "--use-torch-fsdp2", "--use-torch-fsdp2 --pipeline-model-parallel-size 2"
    )
    with pytest.raises(InputError) as caught:
        _imported(tmp_path, "train.sh", piped)
    (problem,) = caught.value.problems
    assert (
        problem.path == "--use-torch-fsdp2" and "--pipeline-model-parallel-size" in problem.message
    )


TT_PP = """[model]
name = "llama3"
flavor = "70B"

[training]
local_batch_size = 8
seq_len = 8192

[parallelism]
tensor_parallel_degree = 8
pipeline_parallel_degree = 4
"""


def test_torchtitan_pipeline_runs_its_local_batch_as_microbatches(tmp_path):
    # job_config.py Parallelism.pipeline_parallel_microbatch_size (default 1): "the total
    # number of microbatches by dividing local_batch_size with pipeline_parallel_microbatch_size"
    # 64 GPUs / (TP 8 x PP 4) = data 2; local 8 / 1 = 8 microbatches of 1 (it was one of 8:
    # the stage's activations for 8 sequences at once, and the bubble of one micro-batch)
    s = _imported(tmp_path, "tt.toml", TT_PP, gpus=64).loaded.scenario
    t = s.training
    assert (t.micro_batch_size, t.grad_accumulation, s.parallel.data) == (1, 8 // 1, 2)
    assert t.global_batch_size in (None, 8 * 2)  # global_batch_size -1: local x data
    # written back as the local batch and the pipeline's microbatch, importing the same
    emitted = emit(s, "torchtitan")
    assert "local_batch_size = 8\n" in emitted.text
    assert "pipeline_parallel_microbatch_size = 1\n" in emitted.text
    back = _imported(tmp_path, "back.toml", emitted.text, gpus=64).loaded.scenario
    assert (back.training.micro_batch_size, back.training.grad_accumulation) == (1, 8)
    # a microbatch size that does not divide the local batch: torchtitan cannot split it
    bad = TT_PP + "pipeline_parallel_microbatch_size = 3\n"
    with pytest.raises(InputError) as caught:
        _imported(tmp_path, "tt.toml", bad, gpus=64)
    (problem,) = caught.value.problems
    assert problem.path == "parallelism.pipeline_parallel_microbatch_size"


def test_only_fp16_loss_scaling_keys_are_called_loss_scaling(tmp_path):
    # DeepSpeed's runtime/constants.py FP16_* loss-scaling keys change no bytes; its
    # fp16_master_weights_and_grads (get_fp16_master_weights_and_grads_enabled) keeps the
    # master in fp16, and bf16 has no loss scaling: each was noted "loss scaling: not
    # modelled (no effect on bytes)"
    # (fp16_master_weights_and_grads is read since frameworks3: the master in fp16, refused
    # without the optimizer offload, tests/test_import_deepspeed_master.py; auto_cast, another
    # fp16 key that is no loss scaling, stands for it here)
    fp16 = {"enabled": True, "loss_scale": 0, "auto_cast": True}
    config = {"train_micro_batch_size_per_gpu": 1, "fp16": fp16}
    notes = _notes(_ds(tmp_path, config))
    assert "fp16.loss_scale: 0: loss scaling: not modelled (no effect on bytes)" in notes
    assert "fp16.auto_cast: true: not mapped (tiersim has no" in notes
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True, "x": 1}}
    assert "bf16.x: 1: not mapped (tiersim has no setting for it)" in _notes(_ds(tmp_path, config))
