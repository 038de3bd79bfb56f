"""The step-time model's parts, each against arithmetic written out here or a published figure:
GEMMs with wave quantization, NCCL's achievable bus bandwidth, a layer's memory-bound bytes,
hidden tensor-parallel collectives, and the breakdown adding up to the simulated step."""

from __future__ import annotations

import math

import pytest
from conftest import SCENARIOS, scenario

from tiersim.config.load import load_scenario
from tiersim.core.errors import InputError
from tiersim.engine.simulate import simulate
from tiersim.hardware import gemm, nccl
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s
from tiersim.workload.kernels import layer_kernels
from tiersim.workload.work import build_workload

PUBLISHED = SCENARIOS / "published"
A100_PEAK = 312e12  # A100 dense fp16/bf16 (datasheet)
A100_CURVE = {2**20: 0.123, 4 * 2**20: 0.255, 16 * 2**20: 0.398, 4 * 2**30: 0.775}


# --- GEMMs -------------------------------------------------------------------------------------


# with no L2 bandwidth given, the two largest tiles only (tests/test_gemm_tiles.py: the others)
def test_a_full_wave_runs_at_the_efficiency():
    # 256 x (128 x 108): one 256 x 128 tile per SM, one full wave over 108 SMs
    assert gemm.wave_efficiency(256, 128 * 108, 1, 108) == 1.0
    t = gemm.gemm_s(256, 128 * 108, 1024, A100_PEAK, 0.8, 108)
    assert t == pytest.approx(2 * 256 * 128 * 108 * 1024 / (A100_PEAK * 0.8))


def test_a_partial_last_wave_costs_a_whole_one():
    # 256 x (128 x 109): 109 tiles of 256 x 128 on 108 SMs, 1.0093 waves -> 2; as 128 x 256
    # tiles 2 x ceil(13952 / 256) = 2 x 55 = 110 tiles, 1.0185 waves -> 2: the better, 0.5093
    best = 110 / 108 / 2
    assert gemm.wave_efficiency(256, 128 * 109, 1, 108) == pytest.approx(best)
    t = gemm.gemm_s(256, 128 * 109, 64, A100_PEAK, 0.8, 108)
    assert t == pytest.approx(2 * 256 * 128 * 109 * 64 / (A100_PEAK * 0.8 * best))
    # batched: 54 heads of 128 x 128, one tile each in either orientation: half a wave; at
    # 256 x 128 the 128 x 256 orientation makes two tiles of each, 108: a full wave
    assert gemm.wave_efficiency(128, 128, 54, 108) == 0.5
    assert gemm.wave_efficiency(256, 128, 54, 108) == 1.0
    assert gemm.wave_efficiency(256, 128 * 109, 1, None) == 1.0  # no SM count: no waves


def test_korthikanti_table4_layer_with_the_fitted_efficiency():
    # Korthikanti et al. 2022 Table 4: one 22B layer (h 6144, 64 heads, t 8, b 4, s 2048), no
    # recompute, forward + backward 19.6 ms; dgx-a100's efficiency 0.736 was fitted to it
    s = load_scenario(
        PUBLISHED / "korthikanti2022-22b-full-recompute.yaml",
        ["training.recompute=none"],
    ).scenario
    layer = build_workload(resolve(s)).units[0]
    blocking = alone_s(resolve(s), layer.tp_forward) + alone_s(resolve(s), layer.tp_backward)
    assert layer.recompute_s == 0.0 and layer.tp_backward is None  # hidden: async backward
    assert layer.forward_s + layer.backward_s + blocking == pytest.approx(19.6e-3, rel=0.005)


# --- collectives -------------------------------------------------------------------------------


def test_busbw_fraction_is_log_linear_between_measured_sizes():
    # 2 MiB is halfway between 1 and 4 MiB in log size
    assert nccl.fraction(A100_CURVE, 2 * 2**20) == pytest.approx((0.123 + 0.255) / 2)
    assert nccl.fraction(A100_CURVE, 2**19) == pytest.approx(0.123 / 2)  # latency-bound below
    assert nccl.fraction(A100_CURVE, 2**40) == 0.775  # the largest measured holds above
    assert nccl.fraction(0.9, 123.0) == 0.9


def test_more_bandwidth_never_lengthens_a_collective_and_unlimited_adds_nothing():
    sent = 1e8
    times = [sent / bw + nccl.slowdown_s(sent, bw, A100_CURVE, sent) for bw in (1e11, 3e11, 9e11)]
    assert times == sorted(times, reverse=True)
    assert nccl.slowdown_s(sent, math.inf, A100_CURVE, sent) == 0.0


def _megatron(tensor: int = 8, **parallel):
    raw = {
        "name": "m",
        "model": {"preset": "megatron-22b"},
        "training": {"micro_batch_size": 4, "seq_len": 2048, "recompute": "none"},
        "parallel": {"tensor": tensor, **parallel},
        "hardware": {"preset": "dgx-a100"},
    }
    return scenario(raw)


def test_tensor_all_reduce_at_the_measured_busbw():
    # s·b·h = 2048·4·6144 x 2 B = 100.66 MB; ring all-reduce sends 2·7/8 of it; busbw between
    # the 64 MiB (0.594) and 128 MiB (0.622) points at log2(100.66e6 / 2^26) of the way
    s = _megatron()
    buffer = 2048 * 4 * 6144 * 2
    w = math.log2(buffer / 2**26)
    share = 0.594 + w * (0.622 - 0.594)
    expected = 2 * 7 / 8 * buffer / (300e9 * share)
    fwd = build_workload(resolve(s)).units[0].tp_forward  # two per layer
    assert alone_s(resolve(s), fwd) == pytest.approx(2 * expected)


def test_hidden_backward_collectives_cost_their_sm_share():
    blocking, hidden = _megatron(), _megatron(overlap_tensor_backward=True)
    b_layer, h_layer = (
        build_workload(resolve(blocking)).units[0],
        build_workload(resolve(hidden)).units[0],
    )
    all_reduces = alone_s(resolve(blocking), b_layer.tp_backward)  # the two, blocking
    assert h_layer.tp_backward is None
    # Calculon's a100_80g processor_usage 0.15 (dgx-a100's collective_sm_share)
    assert h_layer.backward_s - b_layer.backward_s == pytest.approx(0.15 * all_reduces)


# --- memory-bound kernels ----------------------------------------------------------------------


def test_a_layers_memory_bound_bytes_by_hand():
    # no tensor parallelism: e = s·b·h, e_f = s·b·4h, e_a = b·a·s²; forward 22e + 4e_f + 13e_a
    # bytes, backward 38e + 8e_f + 19e_a, at 2,039 GB/s x 0.90; GEMMs priced apart
    s = _megatron(tensor=1)
    sq, b, h, a = 2048, 4, 6144, 64
    e, e_f, e_a = sq * b * h, sq * b * 4 * h, b * a * sq * sq
    bw = 2039e9 * 0.90
    k = layer_kernels(resolve(s), build_model(s.model))
    assert k.forward.memory_s == pytest.approx((22 * e + 4 * e_f + 13 * e_a) / bw)
    assert k.backward.memory_s == pytest.approx((38 * e + 8 * e_f + 19 * e_a) / bw)


def test_megatron_v1_unfused_kernels_bytes_by_hand():
    # ZeRO-Offload's 13B run (one V100, h 4096, 32 heads, b 4, s 1024), Megatron-LM v1's ops
    # each a kernel (DeepSpeedExamples Megatron-LM/mpu/transformer.py), bytes per element:
    # forward, hidden: LayerNorms 4 + 4, bias adds 4 x 3 (QKV) + 4 (projection) + 4 (FC2),
    # q/k/v made contiguous 4 x 3, context made contiguous 4, dropouts 5 + 5, residuals 6 + 6;
    # MLP-wide: bias add 4, GeLU 4; per score: QK^T out 2, scale 4, mask multiply 4, mask
    # subtract 4, softmax 4, dropout 5, PV's read 2
    fwd_e = 4 + 4 + 4 * 3 + 4 + 4 + 4 * 3 + 4 + 5 + 5 + 6 + 6
    fwd_f, fwd_a = 4 + 4, 2 + 4 + 4 + 4 + 4 + 5 + 2
    # backward, hidden: LayerNorms 6 + 6, residual-gradient adds 6 + 6, dropouts 5 + 5, bias
    # gradients read 2 x 3 + 2 + 2, context gradient copy 4, q/k/v gradients copied back to
    # token-major 4 x 3 and concatenated into QKV's 4 x 3;
    # MLP-wide: GeLU 6, bias gradient 2; per score: dP out + P read 4, dropout 5, softmax 6,
    # mask multiply 4, scale 4, dQ/dK reads 4
    bwd_e = 6 + 6 + 6 + 6 + 5 + 5 + 2 * 3 + 2 + 2 + 4 + 4 * 3 + 4 * 3
    bwd_f, bwd_a = 6 + 2, 4 + 5 + 6 + 4 + 4 + 4
    assert (fwd_e, fwd_f, fwd_a, bwd_e, bwd_f, bwd_a) == (66, 8, 25, 72, 8, 27)
    path = PUBLISHED / "ren2021-zero-offload-13b.yaml"
    s = load_scenario(path).scenario
    assert s.training.fused_kernels is False
    sq, b, h, a = 1024, 4, 4096, 32
    e, e_f, e_a = sq * b * h, sq * b * 4 * h, b * a * sq * sq
    bw = 900e9 * 0.90  # V100 HBM2 x the assumed memory efficiency
    k = layer_kernels(resolve(s), build_model(s.model))
    assert k.forward.memory_s == pytest.approx((fwd_e * e + fwd_f * e_f + fwd_a * e_a) / bw)
    assert k.backward.memory_s == pytest.approx((bwd_e * e + bwd_f * e_f + bwd_a * e_a) / bw)
    assert k.recompute == k.forward  # full recompute reruns the same ops
    as_fused = load_scenario(path, ["training.fused_kernels=true"]).scenario
    fused = layer_kernels(resolve(as_fused), build_model(s.model))
    assert fused.forward.memory_s == pytest.approx((22 * e + 4 * e_f + 13 * e_a) / bw)
    assert fused.forward.gemm_s == k.forward.gemm_s  # the GEMMs do not depend on fusion


def test_unfused_kernels_are_refused_for_layers_other_than_gpt2s():
    path = PUBLISHED / "ma2025-qwen2.5-3b-zero-offload.yaml"
    with pytest.raises(InputError) as err:
        load_scenario(path, ["training.fused_kernels=false"])
    assert "training.fused_kernels" in str(err.value) and "gated MLP, RMSNorm" in str(err.value)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("training.attention_kernel=flash", "attention_kernel flash"),
        ("training.attention_kernel=sdpa", "attention_kernel sdpa"),
        ("training.implementation=huggingface", "implementation huggingface"),
    ],
)
def test_unfused_kernels_are_refused_beside_fused_attention_or_other_modelling_code(
    override, named
):
    # zero-offload-10b-dgx2 has fused_kernels false (Megatron-LM v1's ops, attention op by
    # op): a fused attention kernel or transformers' modelling code contradicts it
    with pytest.raises(InputError) as err:
        load_scenario(SCENARIOS / "zero-offload-10b-dgx2.yaml", [override])
    assert "training.fused_kernels" in str(err.value) and named in str(err.value)
    load_scenario(SCENARIOS / "zero-offload-10b-dgx2.yaml", ["training.attention_kernel=eager"])


# --- the breakdown -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["korthikanti2022-22b-selective-sp", "narayanan2021-39.1b"], ids=str
)
def test_breakdown_adds_up_to_the_simulated_step(name):
    # nothing is offloaded and the collectives block the stream, so the step is exactly its
    # priced parts plus the optimizer
    r = simulate(load_scenario(PUBLISHED / f"{name}.yaml").scenario)
    parts = r.breakdown
    total = sum(parts.values()) + r.optimizer_s
    assert total == pytest.approx(r.time_s, rel=1e-6)
    assert parts["gemm_s"] > parts["memory_bound_s"] > 0


def test_unlimited_collective_links_expose_no_transfer_and_cost_nothing():
    # tensor, pipeline and data parallelism on dgx-a100 with its measured NVLink curve, both
    # channels unlimited and without latency: no collective, exchange or reduction takes time
    raw = {
        "name": "u",
        "model": {"preset": "megatron-22b", "layers": 4},
        "training": {"micro_batch_size": 1, "seq_len": 512, "grad_accumulation": 4},
        "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "overlap_gradient_reduce": False},
        "hardware": {
            "preset": "dgx-a100",
            "network": {
                "intra_node_bandwidth": "unlimited",
                "inter_node_bandwidth": "unlimited",
                "intra_node_latency": "0 s",
                "inter_node_latency": "0 s",
            },
        },
    }
    r = simulate(scenario(raw))
    assert r.exposed_transfer_s == 0.0
    assert r.breakdown["collectives_s"] == 0.0
    assert r.breakdown["bubble_s"] > 0  # the pipeline's fill and drain remain


@pytest.mark.parametrize("name", ["zero-offload-10b-dgx2.yaml", "default.yaml"])
def test_a_step_with_no_blocking_collective_reports_exactly_none(name):
    # zero-offload-10b-dgx2: one GPU (no tensor, pipeline or data group): nothing to
    # communicate. default.yaml: data parallel only, its gradient reduce overlapped with
    # backward (no tensor or pipeline group): nothing blocks the stream. Both kernel sums
    # then leave no SM share: exactly 0 s, not the sums' rounding (it was 9.2e-14 s and
    # 1.07e-14 s)
    result = simulate(load_scenario(SCENARIOS / name, []).scenario)
    assert result.breakdown["collectives_s"] == 0.0
