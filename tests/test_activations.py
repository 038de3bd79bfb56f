"""Retained activation bytes, Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models" (arXiv 2205.05198), §4 and Table 2, for the paper's four models.

Table 2, bytes per layer (16-bit activations, s = sequence, b = micro-batch, h = hidden,
a = heads, t = tensor-parallel size):
    no parallelism                       s·b·h·(34 + 5·a·s/h)
    tensor parallel                      s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel           s·b·h·(34/t + 5·a·s/(h·t))
    tensor parallel + selective          s·b·h·(10 + 24/t)
    tensor + sequence + selective        s·b·h·34/t
    full recompute                       2·s·b·h   (2·s·b·h/t with sequence parallelism)
§4.2.3: under 1F1B the first pipeline stage holds p micro-batches of L/p layers, L layers in
all; with interleaving (m model chunks per GPU) that grows by (1 + (p−1)/(p·m)).
"""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve

SEQ = 2048  # the paper's sequence length for all four models
# Table 3: name -> (heads a, hidden h, layers L, tensor t, pipeline p)
PAPER = {
    "megatron-22b": (64, 6144, 48, 8, 1),
    "megatron-175b": (96, 12288, 96, 8, 8),
    "megatron-530b": (128, 20480, 105, 8, 35),
    "megatron-1t": (160, 25600, 128, 8, 64),
}


def per_layer(preset: str, b: int = 1, t: int = 1, sp: bool = False, recompute: str = "none"):
    model = build_model(scenario({"name": "a", "model": {"preset": preset}}).model)
    return model.layer_activation_bytes(SEQ, b, t, sp, recompute)


@pytest.mark.parametrize("preset", PAPER)
@pytest.mark.parametrize("b", [1, 4])
def test_no_parallelism(preset, b):
    a, h, *_ = PAPER[preset]
    s = SEQ
    assert per_layer(preset, b) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
@pytest.mark.parametrize("t", [2, 8])
def test_tensor_parallel(preset, t):
    a, h, *_ = PAPER[preset]
    s, b = SEQ, 1
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert per_layer(preset, b, t) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
def test_tensor_and_sequence_parallel(preset):
    a, h, _, t, _ = PAPER[preset]
    s, b = SEQ, 1
    expected = s * b * h * (34 + 5 * a * s / h) / t
    assert per_layer(preset, b, t, sp=True) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
def test_selective_recompute_drops_the_attention_term(preset):
    _, h, _, t, _ = PAPER[preset]
    s, b = SEQ, 1
    sbh = s * b * h
    assert per_layer(preset, recompute="selective") == pytest.approx(34 * sbh, rel=1e-12)
    assert per_layer(preset, b, t, recompute="selective") == pytest.approx(
        sbh * (10 + 24 / t), rel=1e-12
    )
    assert per_layer(preset, b, t, sp=True, recompute="selective") == pytest.approx(
        sbh * 34 / t, rel=1e-12
    )


@pytest.mark.parametrize("preset", PAPER)
def test_full_recompute_keeps_only_the_layer_input(preset):
    _, h, _, t, _ = PAPER[preset]
    sbh = SEQ * 1 * h
    assert per_layer(preset, recompute="full") == pytest.approx(2 * sbh, rel=1e-12)
    assert per_layer(preset, 1, t, recompute="full") == pytest.approx(2 * sbh, rel=1e-12)
    assert per_layer(preset, 1, t, sp=True, recompute="full") == pytest.approx(
        2 * sbh / t, rel=1e-12
    )


@pytest.mark.parametrize("preset", PAPER)
def test_about_five_times_less_than_the_tensor_parallel_baseline(preset):
    """Abstract: sequence parallelism + selective recompute "reduces activation memory by 5x"
    against the tensor-parallel baseline (t = 8); by hand: 22B 6.2x, 175B 5.4x, 530B and 1T
    4.9x."""
    _, _, _, t, _ = PAPER[preset]
    baseline = per_layer(preset, 1, t)
    present = per_layer(preset, 1, t, sp=True, recompute="selective")
    assert 4.5 < baseline / present < 6.5


def first_stage(preset: str, **parallel):
    micro_batches = parallel.pop("micro_batches", 512)
    recompute = parallel.pop("recompute", "selective")
    raw = {
        "name": "stage",
        "model": {"preset": preset},
        "training": {
            "micro_batch_size": 1,
            "grad_accumulation": micro_batches,
            "seq_len": SEQ,
            "recompute": recompute,
        },
        "parallel": parallel,
    }
    return build_inventory(resolve(scenario(raw)))


# Per GPU of the first stage, sequence parallel + selective: L · s·b·h·34/t bytes
#   22B:  48 · 2048·6144 ·34/8 =  2,566,914,048
#   175B: 96 · 2048·12288·34/8 = 10,267,656,192
#   530B: 105· 2048·20480·34/8 = 18,717,081,600
#   1T:   128· 2048·25600·34/8 = 28,521,267,200
FIRST_STAGE_SP_SELECTIVE = {
    "megatron-22b": 2_566_914_048,
    "megatron-175b": 10_267_656_192,
    "megatron-530b": 18_717_081_600,
    "megatron-1t": 28_521_267_200,
}


@pytest.mark.parametrize("preset", PAPER)
def test_first_stage_holds_all_layers_worth_under_1f1b(preset):
    _, h, layers, t, p = PAPER[preset]
    expected = layers * SEQ * h * 34 / t
    assert expected == FIRST_STAGE_SP_SELECTIVE[preset]
    inv = first_stage(preset, tensor=t, pipeline=p, sequence=True)
    assert inv.stage == 0
    assert inv.inflight_microbatches == p
    assert inv.per_gpu["activations"] == pytest.approx(expected, rel=1e-12)


def test_first_stage_without_recompute_tensor_parallel_only():
    """175B, t = 8, p = 8: L · s·b·h·(10 + 24/t + 5as/(ht)) = 96·25,165,824·23."""
    inv = first_stage("megatron-175b", tensor=8, pipeline=8, recompute="none")
    a, h, t = 96, 12288, 8  # heads, hidden, tensor
    per_layer = SEQ * h * (10 + 24 / t + 5 * a * SEQ / (h * t))  # 10 + 3 + 10 = 23 sbh
    # 12 layers on the first of 8 stages, 8 micro-batches in flight (1F1B)
    assert inv.per_gpu["activations"] == pytest.approx(12 * 8 * per_layer, rel=1e-12)


@pytest.mark.parametrize("virtual", [2, 3, 4])
def test_interleaving_factor(virtual):
    """175B, t = 8, p = 8, m = virtual chunks: L·sbh·34/t · (1 + (p−1)/(p·m))."""
    p = 8
    inv = first_stage(
        "megatron-175b", tensor=8, pipeline=p, virtual_pipeline=virtual, sequence=True
    )
    factor = 1 + (p - 1) / (p * virtual)  # m=2: 1.4375, m=3: 1.2917, m=4: 1.21875
    expected = FIRST_STAGE_SP_SELECTIVE["megatron-175b"] * factor
    assert inv.per_gpu["activations"] == pytest.approx(expected, rel=1e-12)


def test_fewer_micro_batches_than_stages():
    """1F1B with m = 4 micro-batches on p = 8 stages: the first stage holds only 4."""
    inv = first_stage("megatron-175b", tensor=8, pipeline=8, sequence=True, micro_batches=4)
    per_layer_bytes = SEQ * 12288 * 34 / 8
    assert inv.inflight_microbatches == 4
    assert inv.per_gpu["activations"] == pytest.approx(12 * 4 * per_layer_bytes, rel=1e-12)


def test_dense_inventory_is_one_unparallelised_micro_batch():
    """GPT-2 small at s = 1024, b = 1: 12 · s·b·h·(34 + 5as/h) = 12·786,432·114."""
    raw = {"name": "g", "model": {"preset": "gpt2"}, "training": {"seq_len": 1024}}
    inv = build_inventory(resolve(scenario(raw)))
    a, s, h = 12, 1024, 768
    per_layer = s * h * (34 + 5 * a * s / h)  # 34 + 80 = 114 sbh
    assert inv.dense["activations"] == 12 * per_layer == 1_075_838_976


def test_grouped_query_attention_and_gated_mlp():
    """The documented generalisation (model.py) for Llama-2-70B, t = 8, s = 4096, b = 1:
    replicated 10sbh; split by t: Q 2sbh, K and V 2sb·kv each, out-projection input 2sbh,
    the gated MLP's wide tensors 6sbf, attention 5as²b."""
    s, b, h, a, kv, f, t = 4096, 1, 8192, 64, 1024, 28672, 8
    split = 2 * s * b * h + 4 * s * b * kv + 2 * s * b * h + 6 * s * b * f + 5 * a * s * s * b
    expected = 10 * s * b * h + split / t
    model = build_model(scenario({"name": "l", "model": {"preset": "llama-2-70b"}}).model)
    assert model.layer_activation_bytes(s, b, t, False, "none") == pytest.approx(
        expected, rel=1e-12
    )


def test_generic_model_activations_are_given_per_layer():
    """A generic model: the given per-layer bytes times its layers (the seed example)."""
    raw = {
        "name": "seed",
        "model": {"parameters": 10**9, "layers": 24, "activation_bytes_per_layer": "200 MB"},
    }
    inv = build_inventory(resolve(scenario(raw)))
    assert inv.dense["activations"] == 24 * 200_000_000
    assert inv.per_gpu["activations"] == 24 * 200_000_000


# --- accounting by implementation, kernel, dropout and precision (tiersim.state.activations) --


def inventory_json(capsys, tmp_path, **training) -> dict:
    """`tiersim inventory --format json` of GPT-2 small at s = 1024, b = 1, one GPU."""
    import json

    import yaml

    from tiersim.cli import main

    raw = {
        "name": "g",
        "model": {"preset": "gpt2"},
        "training": {"seq_len": 1024, **training},
        "hardware": {"preset": "dgx-h100"},
    }
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["inventory", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inventory_json_groups_gpt2_small_megatron_by_hand(capsys, tmp_path):
    """GPT-2 small (L = 12, h = 768, a = 12), s = 1024, b = 1, Korthikanti et al.: norms
    12·2·2sbh = 37,748,736 B; dropout masks 12·(2·sbh + a·s²·b) = 12·(1,572,864 + 12,582,912)
    = 169,869,312 B; all groups 12·sbh·(34 + 5as/h) = 1,075,838,976 B."""
    got = inventory_json(capsys, tmp_path)
    groups = got["activations"]["per_gpu_bytes_by_group"]
    assert groups["norms"] == 37_748_736
    assert groups["dropout_masks"] == 169_869_312
    assert groups["logits_and_loss"] == 0  # the paper counts the layers only
    assert sum(groups.values()) == 1_075_838_976 == got["inventory"]["per_gpu"]["activations"]
    assert got["activations"]["accounting"]["attention_kernel"] == "eager"


def test_huggingface_counts_the_loss_outside_the_layers(capsys, tmp_path):
    """huggingface on a GPU: the fp32 log-softmax 4·s·b·V = 4·1024·50,257 = 205,852,672 B, the
    head input 2·sbh = 1,572,864 B and the shifted labels (b = 1: the padded (s+1) int64
    storage, 8,200 B) with the loss's 4-byte total weight: 207,433,740 B."""
    got = inventory_json(capsys, tmp_path, implementation="huggingface")
    groups = got["activations"]["per_gpu_bytes_by_group"]
    assert groups["logits_and_loss"] == 205_852_672 + 1_572_864 + 8 * 1025 + 4
    assert sum(groups.values()) == pytest.approx(got["inventory"]["per_gpu"]["activations"], abs=1)


def llama_7b_layer(**training) -> float:
    """Llama 2 7B's dimensions with Megatron-LM's 0.1 dropouts (its argument defaults), which
    the preset, as Llama 2's config, does not carry: the masks these tests count."""
    raw = {
        "name": "l",
        "model": {"preset": "llama-2-7b", "attention_dropout": 0.1, "hidden_dropout": 0.1},
        "training": {"seq_len": 4096, **training},
    }
    s = scenario(raw)
    from tiersim.state.inventory import layer_activation_bytes

    return layer_activation_bytes(resolve(s), build_model(s.model))


def test_megatron_follows_the_compute_precision_masks_stay_one_byte():
    """Llama-2-7B (h = 4096, a = 32, f = 11008), s = 4096, b = 1. bf16: sbh·(10 + 24·...) as
    generalised; fp32 doubles every element but the two sbh masks and the a·s²·b mask (1 B)."""
    s, h, a, f = 4096, 4096, 32, 11008
    sbh, n = s * h, a * s * s
    masks = 2 * sbh + n
    bf16 = 10 * sbh + 2 * sbh + 4 * sbh + 2 * sbh + 6 * s * f + 5 * n
    assert llama_7b_layer() == pytest.approx(bf16, rel=1e-12)
    fp32 = llama_7b_layer(precision={"weights": "fp32", "master": "none"})
    assert fp32 == pytest.approx(2 * (bf16 - masks) + masks, rel=1e-12)


def test_flash_keeps_no_score_matrix_and_no_dropout_drops_the_masks():
    """Flash: the 5as²b term becomes an fp32 log-sum-exp 4·a·s·b; dropout 0 drops the 2sbh
    masks too: Llama-2-7B, s = 4096: 34sbh-style terms only (10 + 2·... as above)."""
    s, h, a, f = 4096, 4096, 32, 11008
    sbh = s * h
    no_scores = 10 * sbh + 2 * sbh + 4 * sbh + 2 * sbh + 6 * s * f
    assert llama_7b_layer(attention_kernel="flash") == pytest.approx(
        no_scores + 4 * a * s, rel=1e-12
    )
    dropless = {"attention_kernel": "flash"}
    raw = {
        "name": "l",
        "model": {"preset": "llama-2-7b", "attention_dropout": 0, "hidden_dropout": 0},
        "training": {"seq_len": 4096, **dropless},
    }
    sc = scenario(raw)
    from tiersim.state.inventory import layer_activation_bytes

    got = layer_activation_bytes(resolve(sc), build_model(sc.model))
    assert got == pytest.approx(no_scores - 2 * sbh + 4 * a * s, rel=1e-12)


# The measurements in issue 16 (transformers on CPU, saved_tensors_hooks, storages once, bf16,
# b = 1): MB per layer. `huggingface` for the CPU reproduces them; megatron is the paper's.
ISSUE_16 = [
    ("llama-2-7b", 4096, "sdpa", 0.0, "763.9"),
    ("llama-2-7b", 1024, "sdpa", 0.0, "191.0"),
    ("gpt2", 1024, "sdpa", 0.0, "44.10"),
    ("gpt2", 1024, "eager", 0.1, "122.69"),
]


@pytest.mark.parametrize(("preset", "seq", "kernel", "dropout", "mb"), ISSUE_16)
def test_issue_16_measurements_per_layer(preset, seq, kernel, dropout, mb):
    from tiersim.state.activations import Accounting, layer_bytes

    model = build_model(scenario({"name": "m", "model": {"preset": preset}}).model)
    acc = Accounting("huggingface", kernel, dropout, dropout, 2, "cpu")
    half_digit = 0.5 * 10 ** -len(mb.split(".")[1])  # the figure as rounded in the issue
    assert layer_bytes(model, seq, 1, acc) / 1e6 == pytest.approx(float(mb), abs=half_digit)


def _model_from_config(tmp_path, fixture: str, **changes):
    import json

    from conftest import FIXTURES

    cfg = {**json.loads((FIXTURES / fixture).read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return scenario({"name": "c", "model": {"hf_config": str(tmp_path / "config.json")}}).model


def test_dropout_is_read_from_config_json(tmp_path):
    """GPT-2: attn_pdrop and resid_pdrop; Llama: attention_dropout (no other dropout in its
    code); absent: GPT2Config's 0.1, LlamaConfig's 0.0."""
    gpt2 = _model_from_config(tmp_path, "gpt2.config.json", attn_pdrop=0.2, resid_pdrop=0.05)
    assert (gpt2.attention_dropout, gpt2.hidden_dropout) == (0.2, 0.05)
    llama = _model_from_config(tmp_path, "llama-3-8b.config.json", attention_dropout=0.3)
    assert (llama.attention_dropout, llama.hidden_dropout) == (0.3, 0.0)
    absent = _model_from_config(tmp_path, "gpt2.config.json", attn_pdrop=None, resid_pdrop=None)
    assert (absent.attention_dropout, absent.hidden_dropout) == (0.1, 0.1)


def test_a_dropout_that_is_no_probability_is_refused(tmp_path):
    from tiersim.core.errors import InputError

    with pytest.raises(InputError, match=r"attn_pdrop: is 1.5 \(expected a probability"):
        _model_from_config(tmp_path, "gpt2.config.json", attn_pdrop=1.5)
