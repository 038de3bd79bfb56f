"""`measure` of the whole step: a real PyTorch step's allocations recorded on the CPU
(torch.profiler's memory events; torch==2.13.0, transformers 5) against tiersim's timeline of
the same step for the CPU: the whole-step peak within 3 % and in the same phase, over dense and
grouped-query attention x recompute none / full x fp32 / bf16 x AdamW, and 8-bit AdamW and Muon
(tiny models: seconds)."""

from __future__ import annotations

import pytest
from conftest import scenario

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiersim.groundtruth.step_timeline import compare_step

# two shapes: the dense one's peak is the loss's backward (vocabulary 512 > hidden 64), the
# grouped-query one's a layer's backward (vocabulary 128, MLP 512)
DENSE = {"hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 128, "vocab": 512}
GQA = {"hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 128}
LLAMA = {"layers": 2, "norm": "rmsnorm", "position": "rope", "gated_mlp": True}
CASES = [
    (name, shape, recompute, dtype)
    for name, shape in (("dense", DENSE), ("gqa", GQA))
    for recompute in ("none", "full")
    for dtype in ("fp32", "bf16")
]


def step_scenario(
    shape: dict, recompute: str, dtype: str, optimizer: str = "adamw", kernel: str = "sdpa"
):
    precision = {k: dtype for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {
        "seq_len": 128,
        "precision": precision,
        "workspace": "0 B",
        "optimizer": optimizer,
        "implementation": "huggingface",
        "attention_kernel": kernel,
        "recompute": recompute,
    }
    model = {**LLAMA, **shape, "tied_embeddings": False, "max_positions": 256}
    return scenario({"name": "step", "model": model, "training": training})


@pytest.mark.parametrize(("name", "shape", "recompute", "dtype"), CASES, ids=lambda v: str(v))
def test_whole_step_peak_within_3_percent_of_pytorch(name, shape, recompute, dtype):
    c = compare_step(step_scenario(shape, recompute, dtype), dtype)
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    assert c.predicted.peak_phase == c.measured.peak_phase == "backward"
    moment = c.timeline.peak_event.moment
    # the grouped-query model in bf16 without recompute peaks in the final RMSNorm's fp32
    # backward (measured: its pow and products' gradients, beside the fp32 copy it saved)
    final_norm = name == "gqa" and (recompute, dtype) == ("none", "bf16")
    expected = "backward: final norm and head" if final_norm else "backward: layer 1"
    assert moment == ("backward: loss" if name == "dense" else expected)


@pytest.mark.parametrize(
    ("name", "shape", "opt"),
    [(n, sh, o) for n, sh in (("dense", DENSE), ("gqa", GQA)) for o in ("adamw8bit", "muon")],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_step_peak_with_8bit_adam_and_muon(name, shape, opt):
    """bitsandbytes' AdamW8bit (its CPU backend, 0.50.2) and torch.optim.Muon with AdamW on
    embeddings, head and vectors (bf16): the whole step within 3 %; 8-bit AdamW's optimizer
    step's own peak (state plus its CPU temporaries, state/optimizers.py) within 3 % too.
    Muon's Newton-Schulz working set is an estimate: on the GQA model's 512 x 128 matrix its
    step measured 1.5 % and 4.3 % apart from it in two runs, so it is not asserted."""
    if opt == "adamw8bit":
        pytest.importorskip("bitsandbytes")
    c = compare_step(step_scenario(shape, "none", "bf16", opt), "bf16")
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    assert c.predicted.peak_phase == c.measured.peak_phase == "backward"
    step = c.predicted.phase_peaks["optimizer"] / c.measured.phase_peaks["optimizer"] - 1
    assert opt == "muon" or abs(step) <= 0.03, (c.measured, c.predicted)


@pytest.mark.parametrize(
    ("shape", "kernel", "dtype"),
    [
        (DENSE, "sdpa", "fp32"),
        (GQA, "sdpa", "bf16"),
        (DENSE, "eager", "fp32"),
        (GQA, "eager", "bf16"),
        (GQA, "eager", "fp32"),
    ],
    ids=[
        "dense-sdpa-fp32",
        "gqa-sdpa-bf16",
        "dense-eager-fp32",
        "gqa-eager-bf16",
        "gqa-eager-fp32",
    ],
)
def test_step_peak_with_selective_recompute(shape, kernel, dtype):
    """Selective recompute as transformers' models run it here: the attention core (SDPA, or
    eager's scores, softmax and product with V) checkpointed (groundtruth/selective.py). Under
    SDPA the core keeps no s x s term and the prediction is recompute none's; eager's fp32
    softmax is dropped (measured: the dense model's step 10 % below its eager step without
    recompute). Within 3 %, in the backward. With grouped-query attention the core is
    recomputed after the MLP's backward has freed what the MLP saved (state/selective_order.py;
    +4.9 % in bf16 while the timeline added it beside the whole saved set). There in bf16 the
    measured forward and backward peaks lie 0.1 % apart (6,396,816 and 6,391,704 B): each
    phase's peak within 3 %, the phase of the step's not compared."""
    c = compare_step(step_scenario(shape, "selective", dtype, kernel=kernel), dtype)
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    if (shape, kernel, dtype) == (GQA, "eager", "bf16"):
        for phase in ("forward", "backward"):
            ratio = c.predicted.phase_peaks[phase] / c.measured.phase_peaks[phase]
            assert abs(ratio - 1) <= 0.03, (phase, c.measured, c.predicted)
        return
    assert c.predicted.peak_phase == c.measured.peak_phase == "backward"


def test_eager_selective_core_backward_peak_at_hidden_64():
    """Issue 38's narrower shape (hidden 64: 4 heads of 16, 2 kv heads, MLP 384, vocabulary
    128), eager selective in bf16, recorded on the CPU (torch 2.13, transformers 5;
    state/selective_order.py): the step peaks in the last layer's core backward at
    3,038,104 B, `_softmax_backward_data`'s fp32 result beside the recomputed fp32 softmax
    output and its gradient cast up to fp32. From 2,235,288 B when the core starts:
    +802,816 B = 3 x 262,144 (4 B x 4 heads x 128²) + 16,384 (k and v repeated to 4 heads,
    2 x 16,384, recomputed; the out-projection's output gradient, 16,384, freed: not counted).
    The timeline counted the core's two saved s² tensors (393,216) beside the MLP's gradients
    (196,608) and put the peak in the loss's backward, -2.42 %: then the core's 786,432 beside
    the flowing gradient (16,384), -0.33 %, at the same moment. Since the checkpointed core
    gets eager's causal mask (groundtruth/selective.py; before, it had none) the step holds it
    too, 2 x 128² = 32,768 B (3,070,872 B recorded); the layers keep K and V at the kv heads
    (state/hf_selective.py) and the core's peak adds the repeated K and V (2 x 16,384): predicted
    3,061,760 B, -0.30 % (9,112 B under)."""
    shape = {"hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 384, "vocab": 128}
    c = compare_step(step_scenario(shape, "selective", "bf16", kernel="eager"), "bf16")
    import torch

    from tiersim.groundtruth.cpu_gemm_scratchpad import onednn_takes

    if onednn_takes(torch.bfloat16):
        # where bf16 GEMMs take oneDNN its scratchpad (uncounted, up to 89,216 B measured on
        # AMX: tests/test_fsdp2_step.py) may set another measured moment: the 3 % bound only
        assert abs(c.predicted.peak_bytes / c.measured.peak_bytes - 1) <= 0.03, c
        return
    # under, by at most 16,384 B (9,112 B recorded here)
    assert 0 < c.measured.peak_bytes - c.predicted.peak_bytes <= 16_384, (c.measured, c.predicted)
    assert c.timeline.peak_event.moment == "backward: layer 1"
    assert c.timeline.peak_event.part == "recompute working set"


def test_measure_huggingface_on_the_cpu_compares_the_step_peaks():
    """`tiersim measure --implementation huggingface` on the CPU: the step's peak from the
    profiler beside the memory timeline's, GPT-2 (tiny; dropout 0.1 as GPT-2's config) in fp32."""
    from tiersim.groundtruth.measure import Request, measure

    model = {"preset": "gpt2", "layers": 2, "hidden": 128, "heads": 4, "vocab": 1000}
    m = measure(Request(model=model, seq_len=128, dtype="fp32", implementation="huggingface"))
    assert m.device == "cpu" and m.peak_allocated_bytes is not None
    assert m.predicted_peak_bytes == m.predicted_step_peak
    assert abs(m.predicted_peak_bytes / m.peak_allocated_bytes - 1) <= 0.03


# Qwen2-MoE: 4 routed experts (2 a token) of width 96 and one gated shared expert of 160
MOE = {"experts": 4, "experts_per_token": 2, "expert_ffn_hidden": 96}
SHARED = {"shared_experts": 1, "shared_expert_ffn_hidden": 160, "shared_expert_gate": True}
QWEN2_MOE = {**LLAMA, **GQA, "hidden": 64, "ffn_hidden": 128, "vocab": 256, **MOE, **SHARED}
QWEN2_MOE |= {"qkv_bias": True, "tied_embeddings": False, "max_positions": 256}


def test_measure_builds_qwen2_moe_and_every_class_equals_the_prediction():
    """Shared-expert MoE measured as transformers 5's Qwen2MoeForCausalLM (fused experts on
    grouped_mm, a gated shared expert): weights, gradients, optimizer state and activations
    equal to the byte, the step's peak within 3 %."""
    from tiersim.groundtruth.measure import Request, measure

    req = Request(model=QWEN2_MOE, seq_len=32, micro_batch_size=2, dtype="fp32", device="cpu",
                  implementation="huggingface")  # fmt: skip
    m = measure(req)
    assert m.family == "qwen2_moe"
    assert m.measured == m.predicted
    assert abs(m.predicted_peak_bytes / m.peak_allocated_bytes - 1) <= 0.03


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_step_peak_of_qwen2_moe_with_full_recompute(dtype):
    """The shared-expert MoE with full recompute: the peak is the last layer's backward (its
    recomputed routed and shared experts), within 3 %."""
    precision = {k: dtype for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {"seq_len": 64, "precision": precision, "workspace": "0 B", "recompute": "full"}
    training |= {"implementation": "huggingface", "attention_kernel": "sdpa"}
    c = compare_step(scenario({"name": "q", "model": QWEN2_MOE, "training": training}), dtype)
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    assert c.predicted.peak_phase == c.measured.peak_phase == "backward"
    assert c.timeline.peak_event.moment == "backward: layer 1"
    # the optimizer step: AdamW's single-tensor temporaries on the fused gate_up parameter
    step = c.predicted.phase_peaks["optimizer"] / c.measured.phase_peaks["optimizer"] - 1
    assert abs(step) <= 0.01, (c.measured, c.predicted)


def moe_scenario(recompute: str, dtype: str, optimizer: str = "adamw"):
    precision = {k: dtype for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {"seq_len": 64, "precision": precision, "workspace": "0 B", "recompute": recompute}
    training |= {
        "implementation": "huggingface",
        "attention_kernel": "sdpa",
        "optimizer": optimizer,
    }
    return scenario({"name": "q", "model": QWEN2_MOE, "training": training})


# the rest of issue 38's matrix in one process (bitsandbytes' AdamW8bit, torch.optim.Muon): 8-bit
# AdamW and Muon in fp32, with recompute full and selective, and on the shared-expert MoE
REST = [
    ("dense", "full", "fp32", "adamw8bit"),
    ("dense", "none", "fp32", "adamw8bit"),
    ("gqa", "selective", "bf16", "adamw8bit"),
    ("moe", "none", "bf16", "adamw8bit"),
    ("moe", "none", "fp32", "adamw8bit"),
    ("gqa", "full", "fp32", "muon"),
    ("gqa", "none", "fp32", "muon"),
    ("dense", "selective", "fp32", "muon"),
    ("moe", "full", "fp32", "muon"),
    ("moe", "selective", "bf16", "muon"),
]


@pytest.mark.parametrize("case", REST, ids=lambda c: "-".join(c))
def test_step_peak_of_the_rest_of_the_matrix(case):
    """Within 3 % and in the same phase, and the optimizer phase's own peak within 3 %
    (bitsandbytes' CPU update one tensor at a time, 20 B a value and 4 more for a 16-bit
    parameter; Muon's Newton-Schulz working set). When written: -0.37 % to +1.14 % whole, the
    optimizer phases -0.01 % to +1.20 %; the MoE in bf16 with 8-bit AdamW peaks in its
    optimizer step (2,848,912 B measured, 2,848,896 B predicted: its fused gate_up tensor's
    update)."""
    name, recompute, dtype, opt = case
    if opt == "adamw8bit":
        pytest.importorskip("bitsandbytes")
    shape = {"dense": DENSE, "gqa": GQA}.get(name)
    s = moe_scenario(recompute, dtype, opt) if shape is None else None
    c = compare_step(s or step_scenario(shape, recompute, dtype, opt), dtype)
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    assert c.predicted.peak_phase == c.measured.peak_phase
    step = c.predicted.phase_peaks["optimizer"] / c.measured.phase_peaks["optimizer"] - 1
    assert abs(step) <= 0.03, (c.measured, c.predicted)
