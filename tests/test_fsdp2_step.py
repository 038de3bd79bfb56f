"""FSDP2's step on 1, 2 and 4 gloo CPU ranks: real `fully_shard` steps of transformers' Llama
recorded with the profiler's memory events (torch==2.13.0, tiersim/groundtruth/fsdp2_step.py)
against tiersim's timeline for the CPU (state/fsdp2_memory.py: FSDP2's all-gather buffers,
unsharded parameters, per-tensor gradients, reduce-scatter input and output, and gloo's own
copies): the whole-step peak within 3 % over dense and grouped-query attention x recompute
none / full x fp32 / bf16 x AdamW, the same shapes as tests/test_step_measure.py; then the rest
of issue 38's matrix (MATRIX: shared-expert MoE, selective recompute, Muon, MoE with Muon;
EIGHT_BIT: torchao's 8-bit AdamW, eager, fp32 on the DTensors and bf16 on each rank's local
shards) and what cannot be stepped under FSDP2 (REFUSED: 8-bit AdamW's DTensor step in bf16),
named by its error; and every one of the matrix's 162 cells (groundtruth/matrix_cells.py:
test_every_cell_of_the_matrix_within_3_percent). The ranks are forked once per world size and
run all their steps, the cells alike but for recompute on one model in turn
(groundtruth/fsdp2_matrix.py; tiny models: a tenth of a second a step)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import scenario

from tiersim.groundtruth.matrix_cells import (
    CELLS,
    DENSE,
    GQA,
    LLAMA,
    fsdp_raw,
    matrix_raw,
)
from tiersim.state.activations import accounting_for
from tiersim.state.fsdp2_memory import ALL_GATHER, GATHERED, RS_INPUT, RS_OUTPUT, TRANSPORT
from tiersim.state.inventory import build_inventory
from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events

CASES = [
    (name, shape, recompute, dtype)
    for name, shape in (("dense", DENSE), ("gqa", GQA))
    for recompute in ("none", "full")
    for dtype in ("fp32", "bf16")
]


def cpu_events(raw: dict):
    """The timeline's events for the CPU (its accounting: gloo's transport)."""
    s = scenario(raw)
    r = dataclasses.replace(resolve(s), accounting=accounting_for(s, "cpu"))
    return build_events(r, build_inventory(r), 0)


# --- the parts, by hand -------------------------------------------------------------------------

# the dense model's layer: q, k, v, o 4 x 64 x 64 = 16,384, gate, up, down 3 x 64 x 128 =
# 24,576, two norms 2 x 64: 41,088 values, 164,352 B in fp32; the root group: embedding and
# head 2 x 512 x 64 + final norm 64 = 65,600 values, 262,400 B
LAYER, ROOT = 164_352, 262_400


def test_two_ranks_gather_into_a_buffer_copy_out_and_gloo_copies_once_more():
    events = cpu_events(fsdp_raw(DENSE, "none", "fp32", 2))
    fwd0 = [(e.part, e.nbytes, e.alloc) for e in events if e.moment == "forward: layer 0"]
    # layer 0's all-gather buffer, gloo's flat output beside it, the unsharded parameters
    # copied out of the buffer, then the root group's buffer (kept to this copy-out) freed
    assert fwd0[:5] == [
        (ALL_GATHER, LAYER, True),
        (TRANSPORT, LAYER, True),
        (TRANSPORT, LAYER, False),
        (GATHERED, LAYER, True),
        (ALL_GATHER, ROOT, False),
    ]
    bwd1 = [(e.part, e.nbytes, e.alloc) for e in events if e.moment == "backward: layer 1"]
    fsdp = [x for x in bwd1 if x[0] in (ALL_GATHER, GATHERED, RS_INPUT, RS_OUTPUT, TRANSPORT)]
    assert fsdp == [
        (GATHERED, LAYER, True),  # copied out of the buffer gathered as the backward started
        (ALL_GATHER, LAYER, False),
        (ALL_GATHER, LAYER, True),  # layer 0's, prefetched
        (TRANSPORT, LAYER, True),
        (TRANSPORT, LAYER, False),
        (GATHERED, LAYER, False),  # resharded after the layer's backward
        (RS_INPUT, LAYER, True),
        (RS_OUTPUT, LAYER // 2, True),  # this rank's half
        (TRANSPORT, LAYER, True),  # gloo's clone of the input, all-reduced
        (TRANSPORT, LAYER, False),
        (RS_OUTPUT, LAYER // 2, False),  # added into the sharded .grad
    ]


def test_on_a_gpu_nccl_writes_in_place_and_one_rank_gathers_without_a_buffer():
    raw = fsdp_raw(DENSE, "none", "fp32", 2)
    gpu = build_events(resolve(scenario(raw)), build_inventory(resolve(scenario(raw))), 0)
    assert not [e for e in gpu if e.part == TRANSPORT]
    # the root group's, layers 0 and 1 in forward (layer 1's freed after the loss's forward),
    # layer 1's again as the backward starts, layer 0's prefetched in layer 1's backward
    gathers = [(e.moment, e.nbytes) for e in gpu if e.part == ALL_GATHER and e.alloc]
    assert gathers == [
        ("forward: embeddings", ROOT),
        ("forward: layer 0", LAYER),
        ("forward: layer 1", LAYER),
        ("backward: loss", LAYER),
        ("backward: layer 1", LAYER),
    ]
    one = cpu_events(fsdp_raw(DENSE, "none", "fp32", 1))
    assert not [e for e in one if e.part in (ALL_GATHER, TRANSPORT)]
    # one rank: the reduce-scatter's input and its output, the whole layer each
    assert [e.nbytes for e in one if e.part == RS_OUTPUT and e.alloc] == [LAYER, LAYER, ROOT]


# --- measured -----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda w: f"{w}ranks")
def recorded(request):
    """Rank 0's recorded steps on the world size's gloo ranks, forked once for them all: every
    cell of issue 38's matrix (groundtruth/matrix_cells.py; the cells alike but for recompute
    step one model in turn, groundtruth/fsdp2_matrix.py), keyed by the cell's names joined by
    '-', then the steps with a model of their own. Muon's Newton-Schulz runs 2 iterations on
    the dense and grouped-query models, not torch's 5: the same StepPeaks, field for field
    (fsdp2_matrix.NS_STEPS_SAME_PEAKS; test_two_newton_schulz_iterations_peak_as_five), at
    18 % of the file's CPU less (docs/suite-time.md)."""
    pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    pytest.importorskip("transformers", reason="needs transformers (the `measure` extra)")
    from functools import partial

    from tiersim.groundtruth.fsdp2_matrix import NS_STEPS_SAME_PEAKS, matrix_tasks
    from tiersim.groundtruth.fsdp2_step import outcome, record_job, run_on_ranks

    world = request.param
    measured = [c for c in CELLS if not missing(c[3])]
    cells, tasks = matrix_tasks(measured, world, NS_STEPS_SAME_PEAKS)
    keys = ["-".join(c) for c in cells]
    jobs = []
    if world == 2:  # and two with every layer kept whole from its forward to its backward
        jobs += [(scenario(kept_whole(sh, rc, dt)), dt) for _, sh, rc, dt in KEPT_WHOLE]
        keys += [f"{name}{recompute}{dtype}-kept" for name, _, recompute, dtype in KEPT_WHOLE]
    if world == 2 and not missing("adamw8bit"):  # 8-bit AdamW by the route it does not take
        for case in (*REFUSED, LOCAL_CHECK):
            route = dtensor_route if case in REFUSED else local_route
            jobs.append((scenario(matrix_raw(*case[:4], world)), case[2], route))
            keys.append("-".join(case[:4]) + f"-{route.__name__}")
    if world == 2:  # eager attention: its s x s scores recomputed (tests/test_selective_order.py)
        jobs.append((scenario(eager_selective(world)), "bf16"))
        keys.append("gqa-selective-bf16-eager")
    tasks += [partial(record_job, *job) for job in jobs]
    return world, dict(zip(keys, map(outcome, run_on_ranks(tasks, world)), strict=True))


def _newton_schulz_bytes(torch, shape: tuple[int, int], steps: int) -> tuple[int, int]:
    """(the peak over X's bf16 copy, the number of memory events) of torch.optim.Muon's
    Newton-Schulz on a matrix of `shape`, from the profiler's memory events."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _zeropower_via_newtonschulz

    grad = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with torch.profiler.profile(profile_memory=True) as prof:
        _zeropower_via_newtonschulz(grad, (DEFAULT_A, DEFAULT_B, DEFAULT_C), steps, 1e-7)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    now = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        now += e.nbytes()
        peak = max(peak, now)
    return peak, len(events)


def test_two_newton_schulz_iterations_peak_as_five():
    """Why the fixture's Muon runs 2 Newton-Schulz iterations: from the second on, each
    allocates and frees the same tensors beside the last one's Gram matrix and A + A·A, so
    the peak of 2 is the peak of 5 and each iteration after the second adds the second's
    events again. Here on a plain tensor (GQA's gate projection, transposed); the FSDP2 cells'
    own StepPeaks (DTensors on 1, 2 and 4 ranks, where one iteration peaks lower: its
    optimizer phase 123,872 B under on 1 rank) were compared field for field, 2 against 5
    (docs/suite-time.md)."""
    torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    (two, n2), (three, n3), (five, n5) = (
        _newton_schulz_bytes(torch, (512, 128), k) for k in (2, 3, 5)
    )
    assert two == three == five, (two, three, five)
    assert n5 - n3 == 2 * (n3 - n2) > 0, (n2, n3, n5)


KEPT_WHOLE = [
    c for c in CASES if (c[0], c[2], c[3]) in {("dense", "none", "fp32"), ("gqa", "full", "bf16")}
]


def kept_whole(shape: dict, recompute: str, dtype: str) -> dict:
    """2 ranks, `parallel.reshard_after_forward: false` (fully_shard's on every layer)."""
    raw = fsdp_raw(shape, recompute, dtype, 2)
    raw["parallel"]["reshard_after_forward"] = False
    return raw


@pytest.mark.parametrize(
    ("name", "shape", "recompute", "dtype"), CASES, ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES]
)
def test_fsdp2_step_peak_within_3_percent_of_pytorch(recorded, name, shape, recompute, dtype):
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    measured = steps["-".join((name, recompute, dtype, "adamw"))]
    assert measured.left_bytes == 0  # every allocation the step made was seen freed
    predicted = predicted_peaks(
        predicted_timeline(scenario(fsdp_raw(shape, recompute, dtype, world)))
    )
    error = predicted.peak_bytes / measured.peak_bytes - 1
    assert abs(error) <= 0.03, (world, measured, predicted)
    assert predicted.peak_phase == measured.peak_phase == "backward"


def test_measure_fsdp_with_transformers_compares_rank_0s_step_peak(capsys):
    """`tiersim measure --fsdp 2 --implementation huggingface --format json`: transformers'
    dense model above under FSDP2 on 2 gloo ranks, rank 0's step peak within 3 % of the
    timeline's, at the loss's backward (vocabulary 512 > hidden 64)."""
    import json

    pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    pytest.importorskip("transformers", reason="needs transformers (the `measure` extra)")
    from tiersim.cli import main

    dims = {**LLAMA, **DENSE, "head_dim": "null"}
    sets = [a for k, v in dims.items() for a in ("--set", f"model.{k}={v}")]
    args = ["measure", "--model", "llama-2-7b", *sets, "--seq-len", "128", "--dtype", "fp32"]
    args += ["--fsdp", "2", "--implementation", "huggingface", "--format", "json"]
    assert main(args) == 0
    peak = json.loads(capsys.readouterr().out)["step_peak"]
    assert abs(peak["predicted_bytes"] / peak["measured_bytes"] - 1) <= 0.03, peak
    assert peak["predicted_moment"] == "backward: loss" and peak["measured_phase"] == "backward"
    assert peak["predicted_parts"]["all-gather buffer (FSDP2)"] == LAYER  # layer 1's, prefetched


@pytest.mark.parametrize(
    ("name", "shape", "recompute", "dtype"),
    KEPT_WHOLE,
    ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in KEPT_WHOLE],
)
def test_fsdp2_kept_whole_after_forward_within_3_percent(recorded, name, shape, recompute, dtype):
    """reshard_after_forward false: every layer whole from its forward to its backward, none
    gathered again; the last layer's all-gather buffer freed at the end of the forward."""
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    if world != 2:
        pytest.skip("measured on 2 ranks")
    measured = steps[f"{name}{recompute}{dtype}-kept"]
    assert measured.left_bytes == 0
    predicted = predicted_peaks(predicted_timeline(scenario(kept_whole(shape, recompute, dtype))))
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase == "backward"


# --- the rest of issue 38's matrix under FSDP2 --------------------------------------------------

# (shape, recompute, dtype, optimizer, ranks): selective recompute checkpoints the attention
# core (groundtruth/selective.py); Muon is torch.optim.Muon on the layers' matrices, AdamW on
# the rest (state/optimizers.py)
MATRIX = [
    ("moe", "none", "fp32", "adamw", (1, 2, 4)),
    ("moe", "full", "fp32", "adamw", (4,)),
    ("moe", "selective", "fp32", "adamw", (2,)),
    ("dense", "selective", "fp32", "adamw", (2,)),
    ("gqa", "selective", "bf16", "adamw", (1, 2, 4)),
    ("dense", "none", "bf16", "muon", (1, 2, 4)),
    ("gqa", "full", "bf16", "muon", (2,)),
    ("gqa", "none", "fp32", "muon", (4,)),
    ("moe", "none", "bf16", "muon", (1, 2)),
    ("dense", "selective", "fp32", "muon", (2,)),
    ("moe", "selective", "bf16", "muon", (4,)),
    ("gqa", "selective", "fp32", "muon", (1,)),
    ("moe", "full", "fp32", "muon", (1,)),
    ("dense", "full", "bf16", "muon", (4,)),
]
# bf16 MoE with full recompute on 2 and 4 ranks: where the CPU sends bf16 GEMMs to oneDNN
# (AVX-512 or AMX), the step peaks inside the experts' gate/up weight-gradient GEMM, beside
# oneDNN's scratchpad, which the timeline does not count (its size follows the rows the
# routing gives the expert; on AMX no rule either)
# (test_fsdp2_moe_bf16_full_recompute_beside_the_gemm_workspace); elsewhere the GEMM takes
# none (groundtruth/cpu_gemm_scratchpad.py) and they are ordinary cells. On 1 rank within
# 3 % either way, and 8-bit AdamW's on 2 ranks peaks in its update
KERNEL_PEAK = [
    ("moe", "full", "bf16", "adamw", (2, 4)),
    ("moe", "full", "bf16", "muon", (2, 4)),
    ("moe", "full", "bf16", "adamw8bit", (4,)),
]
# 8-bit AdamW: torchao's AdamW8bit (0.18.0), its update run eagerly (state/torchao_adamw8bit.py;
# bitsandbytes' refuses DTensors): fp32 on the DTensors, bf16 on each rank's local shards (its
# DTensor step refuses bf16: REFUSED; the two routes measure alike: LOCAL_CHECK)
EIGHT_BIT = [
    ("dense", "none", "fp32", "adamw8bit", (1, 2, 4)),
    ("gqa", "full", "fp32", "adamw8bit", (2,)),
    ("moe", "none", "fp32", "adamw8bit", (1, 2)),
    ("gqa", "selective", "fp32", "adamw8bit", (1,)),
    ("dense", "none", "bf16", "adamw8bit", (2,)),
    ("gqa", "selective", "bf16", "adamw8bit", (2, 4)),
    ("moe", "full", "bf16", "adamw8bit", (2,)),
    ("dense", "full", "bf16", "adamw8bit", (1, 4)),
    ("dense", "selective", "bf16", "adamw8bit", (1, 4)),
    ("moe", "selective", "fp32", "adamw8bit", (1, 4)),
    ("gqa", "none", "bf16", "adamw8bit", (2,)),
]
# what PyTorch refuses to step under FSDP2 (torch 2.13, torchao 0.18.0): the error's words
REFUSED = [
    ("dense", "none", "bf16", "adamw8bit", (2,), "Sharding propagation failed for aten.lerp"),
]
LOCAL_CHECK = ("dense", "none", "fp32", "adamw8bit", (2,))


def dtensor_route(named: list) -> object:
    """torchao's AdamW8bit on the DTensors themselves, eager, whatever their dtype."""
    import torch

    from tiersim.state.torchao_adamw8bit import build_eager

    return build_eager(torch, [p for _, p in named], 1e-4)


def local_route(named: list) -> object:
    """torchao's AdamW8bit on each rank's local shards, whatever their dtype."""
    import torch

    from tiersim.state.torchao_adamw8bit import LocalShards

    return LocalShards(torch, [p for _, p in named], 1e-4)


def missing(name: str) -> str | None:
    """Why the optimizer cannot be built here for DTensors (torchao not installed), else
    None."""
    return optimizer(name).missing(dtensors=True)


def measured_and_predicted(recorded, case: tuple):
    """The case's rank 0 step measured on the fixture's ranks (skipped where it is measured on
    others; every allocation seen freed) and the timeline's peaks for it."""
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    if world not in case[4]:
        pytest.skip(f"measured on {case[4]} ranks")
    measured = steps["-".join(case[:4])]
    assert measured.left_bytes == 0, measured
    return measured, predicted_peaks(predicted_timeline(scenario(matrix_raw(*case[:4], world))))


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: "-".join(c[:4]))
def test_fsdp2_moe_selective_and_muon_within_3_percent(recorded, case):
    """Shared-expert MoE (the layer's FSDP group: its router, fused experts, shared expert and
    gate), selective recompute and Muon under FSDP2: rank 0's step peak within 3 %, in the
    backward. With Muon the optimizer's phase too: each matrix gathered whole on every rank in
    turn (state/muon_sharded.py; DTensor's own collectives settled, groundtruth/muon_dtensor.py,
    so that every free is seen), transformers' 3-D experts and the 1 x 64 shared-expert gate
    stepped by AdamW (state/optimizers.py: Muon takes neither). When written the optimizer
    phases were -2.0 % to 0.0 %; counting each rank's matrix as if held whole, +7.8 % (GQA, 2
    ranks); counting Muon's one moment for the 3-D experts, the MoE step -6.4 % (2 ranks)."""
    measured, predicted = measured_and_predicted(recorded, case)
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase == "backward"
    if case[3] == "muon":
        opt = predicted.phase_peaks["optimizer"] / measured.phase_peaks["optimizer"] - 1
        assert abs(opt) <= 0.03, (measured, predicted)


@pytest.fixture(scope="module")
def onednn_bf16() -> bool:
    """Whether this CPU sends a bf16 GEMM to oneDNN (aten's use_mkldnn_bf16_matmul:
    groundtruth/cpu_gemm_scratchpad.py), whose scratchpad inside the layers the timeline does
    not count; elsewhere a GEMM allocates nothing inside its `mm` (0 B,
    tests/test_cpu_gemm_workspace.py)."""
    torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    from tiersim.groundtruth.cpu_gemm_scratchpad import onednn_takes

    return onednn_takes(torch.bfloat16)


@pytest.fixture(scope="module")
def gate_up_scratchpads() -> dict[int, int]:
    """oneDNN's scratchpad (groundtruth/cpu_gemm_scratchpad.py) of one expert's gate/up
    weight gradient in bf16, grouped_mm's per-expert `mm`: [2f, K] x [K, h] = [192, K] x
    [K, 64], for every K rows a routing can give the expert, 1..R = k·T = 2 x 64 = 128."""
    pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    from tiersim.groundtruth.cpu_gemm_scratchpad import scratchpads

    return scratchpads(2 * 96, 64, range(1, 2 * 64 + 1))


@pytest.mark.parametrize("case", KERNEL_PEAK, ids=lambda c: "-".join(c[:4]))
def test_fsdp2_moe_bf16_full_recompute_beside_the_gemm_workspace(recorded, request, case):
    """bf16 Qwen2-MoE with full recompute: the step's peak is the experts' gate/up weight
    gradient, in one expert's `mm` (grouped_mm's CPU fallback), where that GEMM's workspace
    lives beside what the timeline counts there. Where the CPU keeps bf16 GEMMs off oneDNN
    the workspace is 0 B by aten's source (groundtruth/cpu_gemm_scratchpad.py), as measured
    (tests/test_cpu_gemm_workspace.py), and the cell is held to 3 % like any other. Measured
    so (AMD EPYC, AVX2 only): -1.30 % and -1.80 % (AdamW, 2 and 4 ranks), -1.36 % and
    -1.85 % (Muon), -2.30 % (8-bit AdamW, 4 ranks).

    Where it sends them to oneDNN (AVX-512, AMX) the workspace is oneDNN's scratchpad, sized
    by a blocking search no rule here derives, for the rows the routing gives that expert:
    the prediction must not be more than 3 % high, and is short by no more than the
    kernel's largest scratchpad over any routing (measured on the kernel), within 3 %.
    Measured so on AMX cores (brg_matmul:avx10_1_512_amx): 55,168 B at the peak (K = 33..48
    rows); the prediction -3.09 % (2 ranks) and -4.17 % (4 ranks), +1.08 % and +1.39 % with
    the largest scratchpad (89,216 B, K = 97..127) added; Muon's -3.22 % and -4.28 % (+1.12 %
    and +1.42 %), 8-bit AdamW's on 4 ranks -4.78 % (+1.05 %). On AVX-512 BF16 cores without
    AMX (brg_matmul:avx512_core_bf16, 2026-12-08) Muon's on 4 ranks -5.93 %, +1.35 % with
    the largest (115,840 B at K = 97..128, state/onednn_brgemm.py's rule, as measured). The
    double count these cells passed with before (the down weight's moment and the first
    gradient beside it) was +3.8 % high in fp32."""
    measured, predicted = measured_and_predicted(recorded, case)
    if not request.getfixturevalue("onednn_bf16"):
        assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
        assert predicted.peak_phase == measured.peak_phase == "backward"
        return
    scratchpads = request.getfixturevalue("gate_up_scratchpads")
    assert_peak_beside_the_scratchpad(measured, predicted, scratchpads)


def assert_peak_beside_the_scratchpad(measured, predicted, scratchpads: dict[int, int]) -> None:
    assert predicted.peak_phase == measured.peak_phase == "backward"
    assert predicted.peak_bytes / measured.peak_bytes - 1 <= 0.03, (measured, predicted)
    largest = max(scratchpads.values())
    with_kernel = (predicted.peak_bytes + largest) / measured.peak_bytes - 1
    assert abs(with_kernel) <= 0.03, (measured, predicted, largest)


@pytest.mark.parametrize("cell", CELLS, ids="-".join)
def test_every_cell_of_the_matrix_within_3_percent(recorded, request, cell):
    """Issue 38's target over its whole matrix (groundtruth/matrix_cells.py: 54 cells on each
    of 1, 2 and 4 ranks, 162 in all; the tests above say what each kind of cell stands for):
    every allocation the step made seen freed, rank 0's whole-step peak within 3 % of the
    timeline's and in the same phase, and the optimizer phase's peak within 3 % too. Where
    the CPU sends bf16 GEMMs to oneDNN, the cells whose step peaks beside its scratchpad
    (KERNEL_PEAK) are held to that test's bound. Measured over all 162 (benchmarks/
    fsdp2_matrix.py): on an AVX2 CPU (no oneDNN route) -2.30 % to +0.10 %, the optimizer
    phases -0.60 % to 0.00 % (Muon's 1-rank GQA bf16 +3.57 % while its Newton-Schulz counted
    oneDNN's packed copy there too); on AMX cores the rest -2.00 % to +0.10 %, the optimizer
    phases -1.98 % to +2.51 % (AdamW's -0.13 % to 0.00 %; -2.85 % on the grouped-query model
    while the previous parameter's denominator was not counted, state/single_tensor_adam.py)."""
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    if missing(cell[3]):
        pytest.skip(missing(cell[3]))
    measured = steps["-".join(cell)]
    assert measured.left_bytes == 0, measured
    predicted = predicted_peaks(predicted_timeline(scenario(matrix_raw(*cell, world))))
    kernel_peak = any(cell == k[:4] and world in k[4] for k in KERNEL_PEAK)
    if kernel_peak and request.getfixturevalue("onednn_bf16"):
        scratchpads = request.getfixturevalue("gate_up_scratchpads")
        assert_peak_beside_the_scratchpad(measured, predicted, scratchpads)
        return
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase, (measured, predicted)
    opt = predicted.phase_peaks["optimizer"] / measured.phase_peaks["optimizer"] - 1
    assert abs(opt) <= 0.03, (measured, predicted)


def test_a_moe_layers_experts_gradients_are_its_first_gradients_under_fsdp2():
    """Under FSDP2 an unsharded parameter's `.grad` is None when the backward reaches it, so
    AccumulateGrad keeps the experts' gradients made whole as `.grad` itself, to the
    reduce-scatter: the layer's backward moment holds them, and no first gradient is added
    beside it. Qwen2-MoE, fp32, full recompute, 4 ranks, T = 64 tokens, R = k·T = 128 rows,
    h 64, E 4, f 96, dt 4:
    the gate/up moment dt·(E·2f·h + R·h + R·2f) - dt·R·(4f + h) = 4 x (49,152 + 8,192 + 24,576
    - 57,344) = 98,304, less the freed int64 inverse order 8R = 1,024: 97,280; the down
    weight's gradient kept beside it dt·E·h·f = 4 x 4 x 64 x 96 = 98,304; the gradient
    flowing between layers dt·T·h = 16,384: 211,968 B (the down moment, dt·(E·h + R)·f - 8R +
    16,384 = 162,816, is below it). Then the layer's gradients whole, 117,312 values x 4 =
    469,248 B (test_a_moe_layers_fsdp_group_by_hand), after the moment is freed."""
    events = cpu_events(matrix_raw("moe", "full", "fp32", "adamw", 4))
    layer = [(e.part, e.nbytes, e.alloc) for e in events if e.moment == "backward: layer 1"]
    grads = "unsharded gradients (before reduce-scatter)"
    kept = [x for x in layer if x[0] in ("backward transients", grads)]
    assert kept == [
        ("backward transients", 211_968, True),
        ("backward transients", 211_968, False),
        (grads, 469_248, True),
        (grads, 469_248, False),
    ]


def eager_selective(world: int) -> dict:
    """The grouped-query model in bf16, selective recompute of eager attention's core."""
    raw = matrix_raw("gqa", "selective", "bf16", "adamw", world)
    raw["training"]["attention_kernel"] = "eager"
    return raw


def test_fsdp2_selective_recompute_of_eager_attention_within_3_percent(recorded, onednn_bf16):
    """The core recomputed after the MLP's backward freed what the MLP saved
    (state/selective_order.py; +4.5 % on 2 ranks while the timeline added the recomputed scores
    beside the layer's whole saved set): rank 0's step peak within 3 %, in the backward. Within
    1 % since the core's backward peak (3 fp32 s² tensors) and the layer's gradients made before
    it (the MLP's, o_proj's, the post-attention norm's, unsharded) are counted there
    (state/selective_order.py: -1.34 % before, -0.19 % after; at hidden 64 -8.2 % and -0.36 %,
    docs/fsdp2-memory.md). With eager's causal mask held (the core had none before) and K, V
    kept at the kv heads, their repeats counted at the core's peak: -0.17 %."""
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    if world != 2:
        pytest.skip("measured on 2 ranks")
    measured = steps["gqa-selective-bf16-eager"]
    assert measured.left_bytes == 0
    predicted = predicted_peaks(predicted_timeline(scenario(eager_selective(world))))
    # 1 % where bf16 GEMMs allocate nothing inside their `mm`; 3 % beside oneDNN's scratchpad
    bound = 0.03 if onednn_bf16 else 0.01
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= bound, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase == "backward"


@pytest.mark.parametrize("case", EIGHT_BIT, ids=lambda c: "-".join(c[:4]))
def test_fsdp2_8bit_adamw_within_3_percent(recorded, case):
    """torchao's AdamW8bit under FSDP2, eager (bf16 on the local shards, LOCAL_CHECK): rank 0's
    step peak within 3 %, and its optimizer phase: the state decided on the rank's shard (a
    shard under 4,096 values, or not a multiple of 256, keeps both moments in the parameter's
    dtype; an 8-bit moment has its own 1 KiB map) and the eager update's 53 B a value of the
    largest shard, 4 B more in bf16 (its gradient's fp32 copy; state/torchao_adamw8bit.py).
    On one rank MoE's peak is that update, in the optimizer phase (and dense's in bf16, and
    MoE's with full recompute in bf16 on 2 ranks). Counted with bitsandbytes' rules (the state
    of the whole tensor, 20 B a value), dense on 2 ranks was -3.3 % whole and -38 % in the
    optimizer phase."""
    from tiersim.groundtruth.step_timeline import predicted_peaks, predicted_timeline

    world, steps = recorded
    if world not in case[4]:
        pytest.skip(f"measured on {case[4]} ranks")
    if missing(case[3]):
        pytest.skip(missing(case[3]))
    measured = steps["-".join(case[:4])]
    assert measured.left_bytes == 0, measured
    predicted = predicted_peaks(predicted_timeline(scenario(matrix_raw(*case[:4], world))))
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.03, (measured, predicted)
    assert predicted.peak_phase == measured.peak_phase
    opt = predicted.phase_peaks["optimizer"] / measured.phase_peaks["optimizer"] - 1
    assert abs(opt) <= 0.03, (measured, predicted)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: "-".join(c[:4]))
def test_what_fsdp2_cannot_step_on_the_cpu_is_named(recorded, case):
    """torchao's AdamW8bit cannot step bf16 DTensors on the CPU, eager or compiled: eager,
    DTensor's sharding propagation refuses lerp of the moment (a bf16 spec after `.float()`)
    with the fp32 gradient; compiled, OptimState8bit has no aten.view.dtype
    (docs/muon-fsdp.md). Not measured; the test fails once it runs."""
    world, steps = recorded
    if world not in case[4]:
        pytest.skip(f"tried on {case[4]} ranks")
    if missing(case[3]):
        pytest.skip(missing(case[3]))
    error = steps["-".join(case[:4]) + "-dtensor_route"]
    assert isinstance(error, str) and case[5] in error, error
    pytest.skip(f"{'-'.join(case[:4])} under FSDP2 on {world} gloo ranks: {error.splitlines()[0]}")


def test_a_moe_layers_fsdp_group_by_hand():
    """The MoE layer's all-gather buffer on 2 ranks, fp32: q 64 x 64 + 64, k and v 32 x 64 +
    32 each, o 64 x 64: 12,416; two norms 128; the router 4 x 64 = 256; the fused experts
    gate_up 4 x 192 x 64 = 49,152 and down 4 x 64 x 96 = 24,576; the shared expert 3 x 160 x
    64 = 30,720 and its gate 64: 117,312 values, 469,248 B (the dense layers' padding rule is
    not applied: its shapes have no experts; the gate's one row padded to 2, 256 B, is not
    counted)."""
    events = cpu_events(matrix_raw("moe", "none", "fp32", "adamw", 2))
    gathers = [e.nbytes for e in events if e.part == ALL_GATHER and e.moment == "forward: layer 1"]
    assert gathers[0] == 469_248


def test_8bit_adamw_on_local_shards_measures_what_its_dtensor_step_does(recorded):
    """The bf16 cells step torchao's AdamW8bit on each rank's local shards, as its DTensor step
    refuses bf16 (REFUSED). In fp32, which both routes step, the two measure the same rank 0
    step to the byte (3,370,504 B whole, 1,724,940 B in the optimizer phase when written, dense
    on 2 ranks): the state is decided on, and the update runs over, the same local tensors."""
    world, steps = recorded
    if world != 2:
        pytest.skip("measured on 2 ranks")
    if missing("adamw8bit"):
        pytest.skip(missing("adamw8bit"))
    key = "-".join(LOCAL_CHECK[:4])
    dtensor, local = steps[key], steps[key + "-local_route"]
    assert local.left_bytes == dtensor.left_bytes == 0
    assert local.peak_bytes == dtensor.peak_bytes, (local, dtensor)
    assert local.phase_peaks == dtensor.phase_peaks, (local, dtensor)
