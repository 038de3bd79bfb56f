"""Megatron's vocabulary padding (config/vocab_padding.py), worked by hand.

Megatron-LM (megatron/training/tokenizer/tokenizer.py, `_vocab_size_with_padding`) and NeMo
(megatron_base_model.py, `_vocab_size_with_padding`) round the tokenizer's vocabulary up to a
multiple of make_vocab_size_divisible_by (default 128) x tensor-parallel size; the embedding,
the output layer, the logits and the loss hold the padded rows. transformers and torchtitan
keep the configured vocab_size."""

from __future__ import annotations

import pytest
from conftest import published, scenario
from test_import import _recipe as recipe

from tiersim.config.vocab_padding import padded_vocab
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.report.utilization import model_flops_per_token
from tiersim.state.inventory import build_inventory
from tiersim.state.loss_memory import logits_values
from tiersim.state.resolved import resolve

GPT2 = 124_439_808  # GPT-2 small's parameters (Hugging Face `gpt2`, tied embeddings)
H = 768  # its hidden size


@pytest.mark.parametrize(
    ("vocab", "tensor", "padded"),
    [
        # 128 x 4 = 512; 50,257 / 512 = 98.2 -> 99 x 512 = 50,688 (431 dummy tokens)
        (50_257, 4, 50_688),
        # 128,256 / 512 = 250.5 -> 251 x 512 = 128,512 (Llama 3)
        (128_256, 4, 128_512),
        # 32,000 / 512 = 62.5 -> 63 x 512 = 32,256 (Llama 2)
        (32_000, 4, 32_256),
        # 128 x 8 = 1,024; 51,200 = 50 x 1,024: already a multiple (Megatron's GPT presets)
        (51_200, 8, 51_200),
        # 128 x 1: 128,256 = 1,002 x 128 (Llama 3 at TP 1)
        (128_256, 1, 128_256),
    ],
)
def test_megatron_pads_to_a_multiple_of_128_times_tensor(vocab, tensor, padded):
    assert padded_vocab(vocab, 128, tensor) == padded


def test_no_divisor_keeps_the_vocabulary():
    assert padded_vocab(50_257, None, 4) == 50_257


def gpt2(tensor: int = 4, **training) -> dict:
    return {
        "name": "gpt2-tp",
        "model": {"preset": "gpt2"},
        "parallel": {"tensor": tensor},
        "training": {"seq_len": 128, "precision": {"weights": "bf16"}, **training},
    }


def test_megatron_counts_the_padded_rows_in_the_parameters():
    """framework megatron, TP 4: 50,257 -> 50,688, one tied table of 768 columns: GPT-2's
    124,439,808 + 431 x 768 = 124,770,816 parameters; the report names both vocabularies."""
    r = resolve(scenario(gpt2(framework="megatron")))
    assert (r.model.vocab, r.model.tokenizer_vocab) == (50_688, 50_257)
    assert r.model.parameters == GPT2 + 431 * H == 124_770_816
    assert r.model.summary()["vocab"] == 50_257 and r.model.summary()["padded_vocab"] == 50_688


@pytest.mark.parametrize(
    "training",
    [{}, {"framework": "fsdp"}, {"framework": "deepspeed"}, {"implementation": "huggingface"}],
)
def test_other_frameworks_keep_the_configured_vocabulary(training):
    r = resolve(scenario(gpt2(**training)))
    assert r.model.vocab == 50_257 and r.model.tokenizer_vocab is None
    assert r.model.parameters == GPT2 and "padded_vocab" not in r.model.summary()


def test_the_key_pads_under_any_framework_and_overrides_megatrons_default():
    # Megatron-DeepSpeed: 128 x 1 = 128; 50,257 / 128 = 392.6 -> 393 x 128 = 50,304
    r = resolve(scenario(gpt2(tensor=1, framework="deepspeed", make_vocab_size_divisible_by=128)))
    assert r.model.vocab == 50_304
    # megatron with 1: a multiple of the tensor size only, 50,260 (4 x 12,565)
    r = resolve(scenario(gpt2(framework="megatron", make_vocab_size_divisible_by=1)))
    assert r.model.vocab == 50_260


def test_a_generic_model_has_no_vocabulary_to_pad():
    raw = {"name": "g", "model": {"parameters": 10**9, "layers": 4, "vocab": 50_257}}
    r = resolve(scenario({**raw, "training": {"framework": "megatron"}}))
    assert r.model.vocab is None and r.model.parameters == 10**9


def test_embedding_bytes_per_rank_follow_the_padded_rows():
    """Stage 0 of TP 4, bf16 weights: 50,688 / 4 = 12,672 rows against 50,260 / 4 = 12,565
    (divisor 1): 107 rows x 768 x 2 B = 164,352 B more weights on each GPU."""
    padded = build_inventory(resolve(scenario(gpt2(framework="megatron"))))
    plain = build_inventory(
        resolve(scenario(gpt2(framework="megatron", make_vocab_size_divisible_by=1)))
    )
    assert padded.per_gpu["weights"] - plain.per_gpu["weights"] == 107 * H * 2 == 164_352


def test_logits_and_the_logits_gemm_use_the_padded_vocabulary():
    """128 tokens x 12,672 rows a rank = 1,622,016 logits; the head's forward GEMM
    2 x 128 x 768 x 50,688 = 9,965,666,304 FLOPs over the whole tensor group."""
    r = resolve(scenario(gpt2(framework="megatron")))
    assert logits_values(r) == 128 * 12_672 == 1_622_016
    assert r.model.head_forward_flops(128, 1) == 2 * 128 * H * 50_688 == 9_965_666_304


def test_mfu_counts_the_tokenizers_vocabulary():
    """Model FLOPs (PaLM's MFU, report/utilization.py) are the model's: the padded rows are
    not, so megatron's padding leaves them as they are without it."""
    padded = scenario(gpt2(framework="megatron"))
    plain = scenario(gpt2())
    assert model_flops_per_token(padded) == model_flops_per_token(plain)


@pytest.mark.parametrize(
    ("name", "vocab", "padded"),
    [
        ("nemo2407-llama3-70b-64gpus.yaml", 128_256, 128_512),  # TP 4
        ("nemo2407-llama2-70b-64gpus.yaml", 32_000, 32_256),  # TP 4
        ("nemo2407-gpt3-175b-128gpus.yaml", 50_257, 50_688),  # TP 4
        ("nemo2407-llama3-8b-8gpus.yaml", 128_256, 128_256),  # TP 1: 1,002 x 128
        ("korthikanti2022-175b-selective-sp.yaml", 51_200, 51_200),  # TP 8: 50 x 1,024
    ],
)
def test_published_megatron_runs_pad_as_nemo_and_megatron_do(name, vocab, padded):
    model = published(name).model
    assert model.vocab == padded and (model.tokenizer_vocab or model.vocab) == vocab


def test_inventory_names_both_vocabularies(write, cli):
    path = write(gpt2(framework="megatron"))
    code, out, _ = cli("inventory", path)
    assert code == 0
    assert "vocabulary 50,257 padded to 50,688 (make_vocab_size_divisible_by 128 x tensor 4)" in out


def test_a_divisor_below_one_is_refused(write, cli):
    code, _, err = cli("inventory", write(gpt2(make_vocab_size_divisible_by=0)))
    assert code == 2 and "training.make_vocab_size_divisible_by" in err


# --- the importer ------------------------------------------------------------------------------

SCRIPT = """torchrun --nproc_per_node 8 pretrain_gpt.py \\
  --tensor-model-parallel-size 4 --num-layers 2 --hidden-size 768 \\
  --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 \\
  --micro-batch-size 1 --global-batch-size 8 \\
  --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --bf16 {extra}
"""


def test_import_maps_the_divisor_flag_and_keeps_the_tokenizers_vocabulary(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT.format(extra="--make-vocab-size-divisible-by 64"))
    s = import_configs([path], ImportOptions()).loaded.scenario
    assert s.model.vocab == 50_257 and s.training.make_vocab_size_divisible_by == 64
    # 64 x 4 = 256; 50,257 / 256 = 196.3 -> 197 x 256 = 50,432
    assert resolve(s).model.vocab == 50_432


def test_import_without_the_flag_takes_megatrons_128(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT.format(extra=""))
    imported = import_configs([path], ImportOptions())
    assert imported.loaded.scenario.training.make_vocab_size_divisible_by is None
    assert resolve(imported.loaded.scenario).model.vocab == 50_688  # 128 x 4 = 512: 99 x 512
    assert "Megatron-LM's default" in "\n".join(imported.note_lines())


def test_a_bridge_recipe_keeps_its_hugging_face_vocabulary(tmp_path):
    """AutoBridge's provider does not pad (should_pad_vocab false): Llama 3's 128,256 at TP 4
    stays 128,256, where Megatron-LM's tokenizer path would give 128,512."""
    s = import_configs(
        [recipe(tmp_path)], ImportOptions(gpus=64, recipe="long_pretrain_config")
    ).loaded.scenario
    assert s.parallel.tensor == 4 and s.training.make_vocab_size_divisible_by == 1
    assert resolve(s).model.vocab == 128_256
