"""GPT-3 175B as NeMo 24.07 ran it (scenarios/published/nemo2407-gpt3-175b-*gpus.yaml), term by
term from the source (docs/nemo-memory.md), each figure worked out by hand:

- the gradients of the 512-GPU run in bf16: NVIDIA's MLPerf Training v4.0 GPT-3 recipe for the
  same shape (mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo at
  62f111b7, conf/optim/distributed_fused_adam.yaml: `grad_sync_dtype: bf16`);
- the pipeline outputs NeMo 1.x keeps (megatron_base_model.py `build_model_parallel_config`:
  `"deallocate_pipeline_outputs": False`; Megatron-Core's `deallocate_output_tensor` frees
  nothing then), one per chunk forward in flight (Megatron's interleaved warm-up
  (p - k - 1)·2 + (v - 1)·p, then one forward before each backward);
- Transformer Engine's userbuffers for `tp_comm_overlap` (TE module/base.py at 0004dbd0
  `initialize_ub`: ten buffers of [seq x micro-batch / context, hidden], the six all-gather
  ones uint8 under FP8, the rest bf16; NeMo's `initialize_ub_func` passes that shape).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import published, scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.pipeline_outputs import (
    PIPELINE_OUTPUTS,
    kept_output_bytes,
    kept_outputs,
    output_bytes,
)
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events, outside_terms
from tiersim.state.userbuffers import UB_NAME, userbuffer_bytes

ROOT = Path(__file__).resolve().parents[1]
H = 12_288  # GPT-3 175B's hidden size (Brown et al. 2020, Table 2.1)


def _load(gpus: int):
    return published(f"nemo2407-gpt3-175b-{gpus}gpus.yaml")


@pytest.fixture(scope="module")
def gpt3_512():
    r = _load(512)
    return r, build_inventory(r)


def test_stage_0_gradients_in_bf16_with_the_embeddings_in_fp32(gpt3_512):
    """Stage 0 holds 12 of 96 layers (PP 8) and the embeddings. A layer on one of 4 tensor
    ranks: QKV, projection, fc1, fc2 weights 12·h²/4; the column-parallel biases
    (3h + 4h)/4; the row-parallel biases h + h and two LayerNorms 4h whole:
    3 x 150,994,944 + 7h/4 + 6h = 452,984,832 + 21,504 + 73,728 = 453,080,064; x 12 =
    5,436,960,768 in bf16 (2 B). Word embedding 50,688 / 4 x h = 155,713,536 (NeMo pads 50,257
    to a multiple of make_vocab_size_divisible_by 128 x TP 4 = 512: 99 x 512) and positions
    2,048 x h = 25,165,824, in fp32 (4 B, NeMo's `_with_fp32_optimizer`): 10,873,921,536 +
    723,517,440 = 11,597,438,976 B once each. apex's contiguous buffer holds whole buckets of
    52,428,800 values (tests/test_apex_buckets.py): each chunk of 2 layers, 906,160,128
    values, 18 of them, 108 in all at 2 B; the embeddings 4 at 4 B: 12,163,481,600 B."""
    _, inv = gpt3_512
    layer = 3 * H * H + 7 * H // 4 + 6 * H
    assert layer == 453_080_064
    body, emb = 12 * layer, 50_688 // 4 * H + 2_048 * H
    assert (body, emb) == (5_436_960_768, 180_879_360)
    assert body * 2 + emb * 4 == 11_597_438_976
    assert inv.per_gpu["gradients"] == (108 * 2 + 4 * 4) * 52_428_800 == 12_163_481_600


def test_first_stage_keeps_55_chunk_outputs(gpt3_512):
    """p 8, v 6, m 64 micro-batches, stage 0: warm-up (8 - 0 - 1) x 2 + (6 - 1) x 8 = 54
    forwards, one more before the first backward: 55 chunk outputs at once. Each
    [2,048 / 4 (sequence parallel), 2, 12,288] in bf16 = 25,165,824 B; 55 of them
    1,384,120,320 B, allocated at the start (one each: the cool-down frees them one by one);
    in the cool-down, where apex makes each chunk's gradient shards, as many as chunk
    backwards are left: 40, 32, 24, 16, 8 (stage 0, tests/test_apex_cool_down.py), none after
    the pipeline's flush, before the optimizer."""
    r, inv = gpt3_512
    each = output_bytes(r)
    assert each == 2_048 // 4 * 2 * H * 2 == 25_165_824
    assert kept_outputs(r, 0) == 55
    assert 55 * each == 1_384_120_320
    events = [e for e in build_events(r, inv, 0) if e.part == PIPELINE_OUTPUTS]
    assert all(e.nbytes == each for e in events)
    live, by_moment = 0, {}
    for e in events:  # outputs live after each moment's last event
        live += 1 if e.alloc else -1
        by_moment[e.moment] = live
    assert list(by_moment.values()) == [55, 40, 32, 24, 16, 8, 0]
    assert list(by_moment)[-1] == "cool-down: the pipeline's flush"


def test_the_optimizer_steps_after_the_flush():
    """The 128-GPU run peaked at the optimizer step with the other micro-batches' activations
    (17.90 GB) still held: Megatron's schedules run every cool-down backward before
    `optimizer.step()`, so by then none is left, nor any kept output. Stage 0 (p 8, v 6,
    m 64): 55 chunks of 2 layers in flight, 110 layer-micro-batches of which this one's 12:
    the other 98/110 of the stage's activations, freed in the backward, before the step."""
    r = _load(128)
    inv = build_inventory(r)
    events = build_events(r, inv, 0)
    first_step = next(i for i, e in enumerate(events) if e.phase == "optimizer")
    held = [(i, e) for i, e in enumerate(events) if e.key.startswith(("held", "pipeline outputs"))]
    # one allocation a chunk micro-batch (apex's cool-down drains them, tests/
    # test_apex_cool_down.py), the rest freed at the flush: as many frees as allocations, all
    # before the step
    assert held[0][1].key == "held 0" and held[-1][1].moment == "cool-down: the pipeline's flush"
    assert sum(1 if e.alloc else -1 for _, e in held) == 0
    assert all(i < first_step for i, _ in held)
    at_start = sum(e.nbytes for _, e in held if e.phase == "start" and e.key.startswith("held"))
    assert at_start == pytest.approx(inv.per_gpu["activations"] * 98 / 110, abs=64)


def test_last_stage_does_not_keep_the_loss():
    """Stage 7 (the last): warm-up (6 - 1) x 8 = 40 forwards, chunks 0-4 of micro-batches
    0-7, each keeping its output. Then forward k, backward k - 40: forwards 40-47 are chunk 5's
    (their output the loss, none kept) and backwards 0-7 chunk 5's too (none freed): 40 held.
    Forward 48 is chunk 0 of micro-batch 8 (one more, 41) before backward 8, chunk 4 of
    micro-batch 0, frees one: 41 at most. The 128-GPU run (micro-batch 1): 41 x [512, 1,
    12,288] x 2 B = 41 x 12,582,912 = 515,899,392 B."""
    r = _load(128)
    assert kept_outputs(r, 7) == 41
    assert kept_outputs(r, 7) * output_bytes(r) == 515_899_392


def _tiny_pipeline(optimizer: str | None, virtual: int = 1, grad_accumulation: int = 8):
    raw = {
        "name": "tiny",
        "model": {"preset": "gpt3-175b", "layers": 8},
        "training": {
            "framework": "megatron",
            "distributed_optimizer": optimizer,
            "micro_batch_size": 1,
            "grad_accumulation": grad_accumulation,
            "seq_len": 256,
            "optimizer": "adam",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "bf16"},
        },
        "parallel": {"data": 2, "pipeline": 4, "virtual_pipeline": virtual, "zero_stage": 1},
    }
    if optimizer is None:
        raw["training"]["precision"] = {"weights": "bf16", "gradients": "fp32", "master": "fp32"}
    return resolve(scenario(raw))


def test_1f1b_stage_k_keeps_p_minus_k():
    """1F1B (v 1): stage k runs p - k - 1 warm-up forwards and one more before its first
    backward, p - k outputs; the last stage's one output is the loss: 4, 3, 2, 0. Each
    [256, 1, 12,288] in bf16 = 6,291,456 B (no tensor parallelism)."""
    r = _tiny_pipeline("apex")
    assert [kept_outputs(r, k) for k in range(4)] == [4, 3, 2, 0]
    assert output_bytes(r) == 256 * H * 2 == 6_291_456


def test_all_forwards_first_when_micro_batches_equal_stages():
    """Megatron-Core: with as many micro-batches as stages, every forward runs before the first
    backward: 4 micro-batches x 2 chunks = 8 outputs on stage 0."""
    assert kept_outputs(_tiny_pipeline("apex", virtual=2, grad_accumulation=4), 0) == 8


def test_megatron_lm_frees_them():
    """Megatron-LM sets `deallocate_pipeline_outputs = True` (arguments.py): nothing kept."""
    r = _tiny_pipeline(None)
    assert kept_outputs(r, 0) == 0
    assert not [e for e in build_events(r, build_inventory(r), 0) if e.part == PIPELINE_OUTPUTS]


def test_userbuffers_of_the_512_gpu_run(gpt3_512):
    """[2,048 x 2, 12,288] = 50,331,648 values a buffer; six uint8 (FP8 all-gathers) and four
    bf16: 50,331,648 x (6 + 8) = 704,643,072 B, outside PyTorch's allocator."""
    r, _ = gpt3_512
    assert userbuffer_bytes(r) == 2_048 * 2 * H * (6 * 1 + 4 * 2) == 704_643_072
    terms = {t.name: t.nbytes for t in outside_terms(r)}
    assert terms[UB_NAME] == 704_643_072


def test_userbuffers_in_bf16_without_fp8():
    """The 128-GPU run (micro-batch 1): [2,048, 12,288] = 25,165,824 values x (6 + 8) =
    352,321,536 B; without FP8 ten bf16 buffers, x 20 = 503,316,480 B; without the overlap
    (the tiny pipeline) none."""
    assert userbuffer_bytes(_load(128)) == 2_048 * H * 14 == 352_321_536
    raw = yaml.safe_load((ROOT / "scenarios/published/nemo2407-gpt3-175b-128gpus.yaml").read_text())
    del raw["training"]["fp8"]
    assert userbuffer_bytes(resolve(scenario(raw))) == 2_048 * H * 20 == 503_316_480
    assert userbuffer_bytes(_tiny_pipeline("apex")) == 0


def test_a_model_given_by_its_parameter_count_keeps_none():
    """ren2021-cpu-adam-10b: a model of 10e9 parameters, no hidden size, no pipeline, no TE:
    neither term, and its timeline builds."""
    r = published("ren2021-cpu-adam-10b.yaml")
    assert (kept_output_bytes(r, 0), userbuffer_bytes(r)) == (0, 0)
    assert not [e for e in build_events(r, build_inventory(r), 0) if e.part == PIPELINE_OUTPUTS]


def _raw_512(**training):
    raw = yaml.safe_load((ROOT / "scenarios/published/nemo2407-gpt3-175b-512gpus.yaml").read_text())
    raw["training"].update(training)
    return raw


def test_selective_recompute_under_fp8_drops_the_attention_output():
    """Megatron-Core's selective recompute checkpoints the core attention over q, k, v: the
    fused kernel's output (2 B an element of s·b·h/t) and its softmax statistics are not kept,
    and TE's FP8 out-projection keeps only its 1 B copy. A layer's 29 B (docs/nemo-memory.md)
    become 27 B: 27 x 12,582,912 = 339,738,624 B, the statistics' 393,216 B gone; x 110 layer
    micro-batches on stage 0 = 37,371,248,640 B (40,182,743,040 B without recompute)."""
    none = build_inventory(resolve(scenario(_raw_512())))
    selective = build_inventory(resolve(scenario(_raw_512(recompute="selective"))))
    per_layer = 29 * 12_582_912 + 2 * 24 * 2_048 * 4  # 2 sequences x 96/4 heads x 2,048 x fp32
    assert none.per_gpu["activations"] == 110 * per_layer == 40_182_743_040
    assert selective.per_gpu["activations"] == 110 * 27 * 12_582_912 == 37_371_248_640


def test_selective_recompute_in_bf16_keeps_the_out_projection_input():
    """Without FP8 the out-projection keeps the attention's bf16 output itself; the fused
    kernel's statistics are recomputed inside the core's checkpoint in bf16 as under FP8
    (tests/test_megatron_selective_lse.py): 2 sequences x 96/4 heads x 2,048 x 4 B = 393,216 B
    a layer, x 110 layer micro-batches on stage 0 = 43,253,760 B fewer than without recompute
    (flash attention has no s x s terms, so nothing else goes)."""
    raw, sel = _raw_512(), _raw_512(recompute="selective")
    del raw["training"]["fp8"], sel["training"]["fp8"]
    none = build_inventory(resolve(scenario(raw))).per_gpu["activations"]
    selective = build_inventory(resolve(scenario(sel))).per_gpu["activations"]
    assert none - selective == 110 * 2 * 24 * 2_048 * 4 == 43_253_760
