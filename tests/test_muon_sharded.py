"""Muon's Newton-Schulz on FSDP2's sharded weights (state/muon_sharded.py): each matrix's
transients, gathers and FLOPs on one rank, by hand; then measured, torch.optim.Muon (torch
2.13) stepping one `fully_shard` weight on 2 and 4 gloo CPU ranks
(groundtruth/muon_dtensor.py): the transients' peak within 3 %, the collectives and the
matmuls' FLOPs exact; and the step's timeline and time under `framework: fsdp`."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import scenario

from tiersim.state.muon_sharded import ShardedNewtonSchulz


def test_a_wide_matrix_is_gathered_whole_by_hand():
    """128 x 512 (out <= in: no transpose), 2 ranks, fp32 state: the rank's 64 rows. U, the
    update, 4 x 64 x 512 = 131,072; X, its bf16 copy, 65,536; g, the rank's 64 rows of the
    128 x 128 Gram matrix, 2 x 64 x 128 = 16,384; G, X whole, 2 x 128 x 512 = 131,072. CPU, at
    B·X: U + 2X (the old and new X) + 2g + 2G (X gathered, and a second whole X) = 131,072 +
    131,072 + 32,768 + 262,144 = 557,056. GPU: U + 2X + 2G (X Xᵀ's transposed copy and the
    concatenated gather) = 524,288, above B·X's U + 2X + 2g + G = 425,984."""
    ns = ShardedNewtonSchulz(128, 512, 2)
    assert ns.gathers
    assert ns.temporary_bytes(4, "cpu") == 557_056
    assert ns.temporary_bytes(4, "cuda") == 524_288
    # the same where the CPU's GEMMs pack nothing (aten's route): the second G is no packed
    # copy (measured so on an AVX2 CPU, 557,056 B to the byte)
    assert ns.temporary_bytes(4, "cpu", "aten") == 557_056
    # 5 iterations x (X twice, 2 x 131,072, and the Gram matrix, 2 x 128², 32,768)
    assert ns.gathered_bytes() == 5 * (2 * 131_072 + 32_768) == 1_474_560
    assert ns.all_reduced_bytes() == 0
    # every matmul on the rank's rows: 5 x (4 x 128² x 512 + 2 x 128³) / 2
    assert ns.flops() == 5 * (4 * 128**2 * 512 + 2 * 128**3) / 2 == 94_371_840


def test_a_tall_matrix_all_reduces_its_gram_matrix_by_hand():
    """512 x 128 (out > in: transposed, X is [128, 512] cut along 512), 2 ranks, fp32: U = 4 x
    256 x 128 = 131,072, X = 65,536, R, the Gram matrix whole, 2 x 128² = 32,768. At B·X, CPU:
    U + 3X + 3R = 131,072 + 196,608 + 98,304 = 425,984; GPU: U + 2X + 3R = 360,448. At A·A,
    CPU: U + X + 5R = 131,072 + 65,536 + 163,840 = 360,448, GPU U + X + 4R = 327,680: smaller.
    No gather; X's norm (one bf16 value) and 2 all-reduces of R an iteration; A + A·A whole on
    every rank."""
    ns = ShardedNewtonSchulz(512, 128, 2)
    assert not ns.gathers
    assert ns.temporary_bytes(4, "cpu") == 425_984
    assert ns.temporary_bytes(4, "cuda") == 360_448
    assert ns.temporary_bytes(4, "cpu", "aten") == 360_448
    assert ns.gathered_bytes() == 0
    assert ns.all_reduced_bytes() == 5 * 2 * 32_768
    assert ns.collectives() == (("all_reduce", 2, 1), ("all_reduce", 32_768, 10))
    assert ns.flops() == 5 * (4 * 128**2 * 512 / 2 + 2 * 128**3) == 104_857_600
    assert ns.whole_flops() == 5 * 2 * 128**3 == 20_971_520


def test_a_wide_gram_matrix_peaks_at_a_times_a_by_hand():
    """256 x 192 (out > in), 2 ranks, bf16: X is [192, 256] cut along 256, U = X = 2 x 128 x
    192 = 49,152, R = 2 x 192² = 73,728. At B·X, CPU: U + 3X + 3R = 196,608 + 221,184 =
    417,792. At A·A: the Gram matrix, its all-reduced copy, A + A·A, the last iteration's A +
    A·A (still held) and oneDNN's packed Gram matrix, U + X + 5R = 98,304 + 368,640 = 466,944,
    the larger (m = 192 > n / W = 128); GPU: U + X + 4R = 393,216 against U + 2X + 3R =
    368,640. Before, only B·X's moment was counted (417,792, -10.5 % on the CPU)."""
    ns = ShardedNewtonSchulz(256, 192, 2)
    assert ns.temporary_bytes(2, "cpu") == 466_944
    assert ns.temporary_bytes(2, "cuda") == 393_216
    assert ns.temporary_bytes(2, "cpu", "aten") == 393_216


def test_without_amx_each_matmul_holds_onednns_scratchpad_not_a_packed_copy_by_hand():
    """On AVX-512 BF16 cores without AMX ("onednn-avx512") oneDNN copies one 64-column block of
    the second operand and keeps an fp32 accumulator (state/onednn_brgemm.py): S(M, K, N) =
    1,024 + 2 x 64 x K + 4 x M x min(N, 64), held inside each matmul beside its moment's
    tensors. 512 x 128 on 2 ranks, bf16 (U = X = 65,536, R = 32,768): B·X, [128, 128] x
    [128, 256], S = 1,024 + 16,384 + 32,768 = 50,176, U + 2X + 3R + S = 294,912 + 50,176 =
    345,088 (A·A: U + X + 4R + S = 262,144 + 50,176 = 312,320; X Xᵀ, K = 256: U + X + 3R +
    66,560 = 295,936); measured 345,088. On 4 ranks (U = X = R = 32,768, every product 128³)
    B·X and A·A alike, 196,608 + 50,176 = 246,784; measured 246,788. Counting a packed copy
    (the AMX figure) gave 360,448 (+4.5 %) and 229,376 (-7.1 %)."""
    assert ShardedNewtonSchulz(512, 128, 2).temporary_bytes(2, "cpu", "onednn-avx512") == 345_088
    assert ShardedNewtonSchulz(512, 128, 4).temporary_bytes(2, "cpu", "onednn-avx512") == 246_784
    # the GPU's and the other routes' sets are not touched
    assert ShardedNewtonSchulz(512, 128, 2).temporary_bytes(2, "cpu", "onednn") == 360_448
    assert ShardedNewtonSchulz(512, 128, 2).temporary_bytes(2, "cuda", "onednn-avx512") == 294_912


def test_without_amx_a_small_gathered_matrix_peaks_in_x_times_x_transposed_by_hand():
    """32 x 256 (gathered) on 2 ranks, bf16: U = X = 2 x 16 x 256 = 8,192, g = 2 x 16 x 32 =
    1,024, G = 16,384. X Xᵀ on X gathered and concatenated, [16, 256] x [256, 32]: S = 1,024 +
    2 x 64 x 256 + 4 x 16 x 32 = 35,840, beside U + X + 3g (the last iteration's Gram rows and
    A + A·A, this one's Gram rows) + G = 16,384 + 3,072 + 16,384 = 35,840: 71,680. The
    no-matmul moment U + 2X + 2g + 2G = 59,392 is below it; measured 71,680. One rank,
    256 x 1024 fp32 (U = 1,048,576, X = 524,288, R = 131,072): B·X, S(256, 256, 1024) =
    1,024 + 32,768 + 65,536 = 99,328, U + 2X + 2R + S = 2,458,624; measured 2,458,624."""
    ns = ShardedNewtonSchulz(32, 256, 2)
    assert ns.temporary_bytes(2, "cpu", "onednn-avx512") == 16_384 + 3_072 + 16_384 + 35_840
    assert ns.temporary_bytes(2, "cpu", "onednn-avx512") == 71_680
    one = ShardedNewtonSchulz(256, 1024, 1)
    assert one.temporary_bytes(4, "cpu", "onednn-avx512") == 2_359_296 + 99_328 == 2_458_624


# a layer whose queries are wider than the hidden size (heads x head_dim = 192 > 128, as Qwen3's
# and Gemma's are): every orientation in one layer
WIDE_Q = {"hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 48, "ffn_hidden": 384}
WIDE_Q |= {"vocab": 128, "layers": 1, "norm": "rmsnorm", "position": "rope", "gated_mlp": True}


def _layer():
    """(tiersim's model of WIDE_Q, its layer's matrices, the Muon ones)."""
    from tiersim.state.resolved import resolve

    model = resolve(scenario({"name": "wide-q", "model": WIDE_Q})).model
    mats = model.layer_matrices(0)
    return model, mats, [m for m in mats if m.cols > 1]


def test_a_layers_matrices_take_nn_linears_orientation():
    """nn.Linear(in, out) holds [out, in]: q_proj [192, 128], k_proj and v_proj [96, 128],
    o_proj [128, 192], gate_proj and up_proj [384, 128], down_proj [128, 384]. tiersim keeps
    [in, out] and one shape (128, 384) for the MLP's three, the down projection 1 of the 3."""
    _, _, mats = _layer()
    assert [m.linear_shapes() for m in mats] == [
        ((192, 128, 1),),
        ((96, 128, 2),),
        ((128, 192, 1),),
        ((384, 128, 2), (128, 384, 1)),
    ]


def test_a_layers_collectives_and_flops_by_hand():
    """WIDE_Q's layer on 2 ranks, bf16 X (5 iterations). X's norm: one all-reduce of 2 B per
    matrix, 7. All-reduced (out > in, m = 128): q, gate and up, the Gram matrix 2 x 128² =
    32,768 B twice an iteration: 3 x 10 = 30. Gathered (out <= in): k and v (m = 96, n = 128),
    X whole 2 x 96 x 128 = 24,576 B twice an iteration (20) and the Gram matrix 2 x 96² =
    18,432 once (10); o (128 x 192) X 49,152 (10) and Gram 32,768 (5); down (128 x 384) X
    98,304 (10) and Gram 32,768 (5). Before, every matrix gathered: 7 x 15 = 105 all-gathers,
    no all-reduce."""
    from tiersim.state.optimizers import optimizer

    _, _, mats = _layer()
    muon = optimizer("muon")
    assert sorted(muon.sharded_collectives(mats, 2)) == [
        ("all_gather", 18_432, 10),
        ("all_gather", 24_576, 20),
        ("all_gather", 32_768, 10),
        ("all_gather", 49_152, 10),
        ("all_gather", 98_304, 10),
        ("all_reduce", 2, 7),
        ("all_reduce", 32_768, 30),
    ]
    assert muon.sharded_collectives(mats, 1) == ()
    # FLOPs on a rank: q, gate, up split their X Xᵀ and B·X (4m²n / 2) but run A·A whole
    # (2m³); k, v, o, down split everything
    q = 5 * (4 * 128**2 * 192 / 2 + 2 * 128**3)
    kv = 2 * 5 * (4 * 96**2 * 128 + 2 * 96**3) / 2
    o = 5 * (4 * 128**2 * 192 + 2 * 128**3) / 2
    gate_up = 2 * 5 * (4 * 128**2 * 384 / 2 + 2 * 128**3)
    down = 5 * (4 * 128**2 * 384 + 2 * 128**3) / 2
    assert q + kv + o + gate_up + down == 367_984_640
    whole = 3 * 5 * 2 * 128**3
    assert muon.whole_gemm_flops(mats, 2) == whole == 62_914_560
    assert muon.whole_gemm_flops(mats, 1) == 0
    split = (muon.update_gemm_flops(mats) - whole) / 2
    assert split + whole == 367_984_640


def test_moe_experts_take_their_orientation_as_the_model_holds_them():
    """4 gated experts of 64 -> 96 -> 64, 12 tensors: as 2-D weights (megatron's accounting)
    gate and up [96, 64] all-reduce their 64 x 64 Gram matrix (2 x 64² = 8,192 B, 10 a
    matrix, 80), down [64, 96] gathers X (2 x 64 x 96 = 12,288 B, 10 a matrix, 40) and the
    Gram matrix (5 a matrix, 20), and each has its norm (12); fused into transformers 5's 3-D
    tensors (huggingface) AdamW steps them: no collective, no Newton-Schulz."""
    from tiersim.state.layers import Matrix
    from tiersim.state.optimizers import optimizer

    experts = Matrix(64, 96, 12, tensor_split=False, expert=True, down_every=3)
    assert experts.linear_shapes() == ((96, 64, 8), (64, 96, 4))
    muon = optimizer("muon")
    assert sorted(muon.sharded_collectives([experts], 2)) == [
        ("all_gather", 8_192, 20),
        ("all_gather", 12_288, 40),
        ("all_reduce", 2, 12),
        ("all_reduce", 8_192, 80),
    ]
    assert muon.whole_gemm_flops([experts], 2) == 8 * 5 * 2 * 64**3
    fused = Matrix(64, 96, 12, tensor_split=False, expert=True, fused=True, down_every=3)
    assert muon.sharded_collectives([fused], 2) == ()
    assert muon.whole_gemm_flops([fused], 2) == 0


# --- measured -----------------------------------------------------------------------------------

# (weights' [out, in], dtype): gathered (out <= in), all-reduced (out > in) at B·X's moment and
# at A·A's, square; then WIDE_Q's layer as tiersim's own nn.Linear modules hold it (LAYER)
JOBS = [
    (((128, 512),), "fp32"),
    (((512, 128),), "bf16"),
    (((256, 256),), "bf16"),
    (((256, 192),), "bf16"),
]
LAYER = len(JOBS)


def _layer_shapes() -> tuple[tuple[int, int], ...]:
    """The [out, in] of the 2-D weights of tiersim's PyTorch layer (groundtruth/torchmodels.py)
    for WIDE_Q: q, k, v, o, up, gate, down, as its modules create them."""
    from tiersim.groundtruth.torchmodels import Block

    model, _, _ = _layer()
    return tuple(tuple(p.shape) for p in Block(model, "sdpa").parameters() if p.ndim == 2)


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def stepped(request):
    pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    from tiersim.groundtruth.muon_dtensor import record_muon_steps

    return request.param, record_muon_steps([*JOBS, (_layer_shapes(), "bf16")], request.param)


def _as_measured(collectives, world: int) -> list:
    """The model's (op, bytes of the whole tensor, calls) as the profiler shows gloo's, by op
    and size: an all-gather is given the rank's 1/W."""
    calls: Counter = Counter()
    for op, size, k in collectives:
        calls[op, size // world if op == "all_gather" else size] += k
    return sorted([op, size, k] for (op, size), k in calls.items())


def _route() -> str:
    """This CPU's route for a bf16 GEMM (groundtruth/cpu_gemm_scratchpad.py): "onednn" (AMX),
    whose GEMMs pack their second operand, "onednn-avx512", whose hold a scratchpad of one
    block, or "aten", whose pack nothing."""
    from tiersim.groundtruth.cpu_gemm_scratchpad import cpu_gemm_route

    return cpu_gemm_route()


@pytest.mark.parametrize("job", range(len(JOBS)), ids=lambda j: "x".join(map(str, JOBS[j][0][0])))
def test_muon_on_sharded_weights_as_measured(stepped, job):
    """Measured (torch 2.13 CPU, gloo): every free seen; 15 all-gathers (3 an iteration) and
    X's norm's all-reduce where out <= in, 11 all-reduces (the norm's, 2 an iteration) where
    out > in, each of the bytes the model gives (the profiler's shapes and dtypes); the local
    matmuls' FLOPs (the profiler's) as the model's; the transients' peak within 3 %, for the
    route this CPU's bf16 GEMMs take (on oneDNN's with AMX, its 5,120 B beside each packed
    copy not counted: -0.0 % to -2.2 % when written on AMX cores; on aten's, no packed copy:
    the GPU's sets; before the route was read, 512 x 128 on 2 ranks was +22.2 % on an AVX2
    CPU; on AVX-512 BF16 without AMX, each matmul's scratchpad: every job on 1, 2 and 4 ranks
    to the byte or 4 B short, where the AMX sets gave 512 x 128 +4.45 % and -7.06 %)."""
    world, steps = stepped
    ((rows, cols),), dtype = JOBS[job]
    got = steps[job]
    assert got.left_bytes == 0
    expected = {"all_reduce": 1, "all_gather": 15} if rows <= cols else {"all_reduce": 11}
    assert got.collectives == expected
    ns = ShardedNewtonSchulz(rows, cols, world)
    assert got.collective_sizes == _as_measured(ns.collectives(), world)
    assert got.matmul_flops == ns.flops()
    predicted = ns.temporary_bytes({"fp32": 4, "bf16": 2}[dtype], "cpu", _route())
    assert abs(predicted / got.peak_bytes - 1) <= 0.03, (world, got, predicted)


def test_a_layers_muon_step_as_measured(stepped):
    """WIDE_Q's layer, its 7 weights in one `fully_shard` group as tiersim's PyTorch modules
    hold them (bf16): the collectives, by op and size, and the matmuls' FLOPs are what tiersim
    gives its layer's matrices in their orientation (on 2 ranks, by hand above); the step's
    peak, the down projection's (gathered), within 3 %."""
    from tiersim.state.optimizers import optimizer

    world, steps = stepped
    got = steps[LAYER]
    assert _layer_shapes() == (
        (192, 128),
        (96, 128),
        (96, 128),
        (128, 192),
        (384, 128),
        (384, 128),
        (128, 384),
    )
    assert got.left_bytes == 0
    _, _, mats = _layer()
    muon = optimizer("muon")
    assert got.collective_sizes == _as_measured(muon.sharded_collectives(mats, world), world)
    whole = muon.whole_gemm_flops(mats, world)
    assert got.matmul_flops == (muon.update_gemm_flops(mats) - whole) / world + whole
    route = _route()
    predicted = muon.step_temporary_bytes(0, 0, 2, "cpu", mats, world, cpu_gemm=route)
    assert abs(predicted / got.peak_bytes - 1) <= 0.03, (world, got, predicted)


# --- in the step's timeline and its time --------------------------------------------------------


def _fsdp_muon(world: int) -> dict:
    """The grouped-query model of tests/test_fsdp2_step.py (hidden 128, MLP 512, vocabulary
    128) under FSDP2 on `world` ranks, bf16, Muon."""
    from test_fsdp2_step import GQA, matrix_raw

    assert GQA["ffn_hidden"] == 512
    return matrix_raw("gqa", "none", "bf16", "muon", world)


def test_the_optimizer_steps_temporaries_gather_the_largest_matrix():
    """2 ranks, bf16, on the CPU: the MLP's 128 x 512 matrices, gathered: U 2 x 64 x 512 =
    65,536, 2X 131,072, 2g 2 x 2 x 64 x 128 = 32,768, 2G 2 x 131,072: 491,520 (the rest's AdamW,
    2 x 128 x 128 / 2 x 2 B x 2 = 32,768, is smaller). Counted as if the rank held the matrix
    whole, (2 + 8) B x 65,536 = 655,360, before (+7.8 % on the measured optimizer phase)."""
    from test_fsdp2_step import cpu_events

    events = cpu_events(_fsdp_muon(2))
    temps = [e for e in events if e.part == "optimizer step temporaries" and e.alloc]
    assert [e.nbytes for e in temps] == [491_520]


def test_the_collectives_are_timed_on_the_data_parallel_link():
    """Llama-2-7B under FSDP2 over 8 H100s with Muon: a layer's update is its Newton-Schulz
    FLOPs on the rank plus its collectives on the data-parallel link, one size at a time. q, k,
    v, o [4096, 4096] and down [4096, 11008] gather (X whole twice and the Gram matrix once an
    iteration, bf16, all split 8 ways); gate and up [11008, 4096] all-reduce their 4096 x 4096
    Gram matrix twice an iteration and run A + A·A (2 x 4096³) whole on every rank; each
    matrix all-reduces X's norm, one bf16 value."""
    from tiersim.state.resolved import resolve
    from tiersim.workload.comms import alone_s, comm
    from tiersim.workload.work import build_workload

    raw = {
        "name": "muon-fsdp",
        "model": {"preset": "llama-2-7b"},
        "training": {"optimizer": "muon", "seq_len": 1024, "framework": "fsdp"},
        "hardware": {"preset": "dgx-h100"},
        "parallel": {"data": 8, "zero_stage": 3},
    }
    r = resolve(scenario(raw))
    layer = next(u for u in build_workload(r).units if u.name.startswith("L"))
    h, f = 4096, 11008
    attention = 4 * 5 * 6 * h**3 / 8
    gate_up = 2 * 5 * (4 * h**2 * f / 8 + 2 * h**3)
    down = 5 * (4 * h**2 * f + 2 * h**3) / 8
    rate = r.machine.gpu.peak_flops["bf16"] * r.machine.gpu.efficiency
    sizes = [
        ("all_gather", 2 * h * h, 4 * (2 * 5 + 5) + 5),  # q, k, v, o: X, Gram; down: Gram
        ("all_gather", 2 * h * f, 5 * 2),  # down's X
        ("all_reduce", 2 * h * h, 2 * 5 * 2),  # gate's and up's Gram, A + A·A
        ("all_reduce", 2, 7),  # X's norm
    ]
    collectives_s = sum(
        alone_s(r, comm(r, "optimizer", "data", op, size, calls)) for op, size, calls in sizes
    )
    assert collectives_s > 0.005
    flops_s = (attention + gate_up + down) / rate
    assert layer.optimizer_gpu_s == pytest.approx(flops_s + collectives_s)


# --- what Muon takes ----------------------------------------------------------------------------


def test_transformers_fused_experts_keep_adamws_two_moments():
    """Qwen2-MoE's routed experts as tiersim holds them, 4 experts x 3 tensors of 64 x 96 =
    73,728 values: under `implementation: huggingface` transformers 5 fuses them into 3-D
    gate_up_proj and down_proj, which torch.optim.Muon refuses, so AdamW steps them: 2 moments
    x 73,728 x 2 B = 294,912 B in bf16; Megatron's 2-D experts keep Muon's one, 147,456 B."""
    from test_fsdp2_step import matrix_raw

    from tiersim.state.layers import Matrix
    from tiersim.state.sharding import raw_parameter_bytes

    experts = Matrix(64, 96, 12, tensor_split=False, expert=True)
    training = scenario(matrix_raw("moe", "none", "bf16", "muon", 1)).training
    assert training.implementation == "huggingface"
    assert raw_parameter_bytes(training, [experts])["optimizer"] == 294_912
    megatron = training.model_copy(update={"implementation": "megatron"})
    assert raw_parameter_bytes(megatron, [experts])["optimizer"] == 147_456


def test_muon_leaves_3d_and_one_row_tensors_to_adamw():
    torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    from tiersim.state.optimizers import optimizer

    named = [
        ("layers.0.mlp.experts.gate_up_proj", torch.nn.Parameter(torch.zeros(4, 6, 8))),
        ("layers.0.mlp.shared_expert_gate.weight", torch.nn.Parameter(torch.zeros(1, 8))),
        ("layers.0.self_attn.q_proj.weight", torch.nn.Parameter(torch.zeros(8, 8))),
    ]
    muon, adamw = optimizer("muon").build(torch, named)
    assert [p.shape for g in muon.param_groups for p in g["params"]] == [(8, 8)]
    assert [p.shape for g in adamw.param_groups for p in g["params"]] == [(4, 6, 8), (1, 8)]


def test_one_rank_keeps_the_gram_matrix_beside_three_copies_of_x():
    """No collective on one rank: 256 x 1024 fp32, U 4 x 262,144 = 1,048,576, 3X (X, the new
    X, oneDNN's packed X) 3 x 524,288 = 1,572,864, the Gram matrix and A + A·A 2 x 2 x 256² =
    262,144: 2,883,584 B on the CPU (measured, torch 2.13, one rank: 2,888,704 B, oneDNN's
    5,120 B more); on a GPU 2X: 2,359,296 B."""
    ns = ShardedNewtonSchulz(256, 1024, 1)
    assert ns.temporary_bytes(4, "cpu") == 2_883_584
    assert ns.temporary_bytes(4, "cuda") == 2_359_296
    assert ns.temporary_bytes(4, "cpu", "aten") == 2_359_296


def test_measure_fsdp_muon_with_tiersims_modules_names_the_implementation_that_takes_it(capsys):
    """Without --implementation huggingface, --fsdp steps AdamW or Adam only: a user asking
    for Muon (docs/muon-fsdp.md) is told which implementation steps it, exit 2, no rank
    started."""
    from tiersim.cli import main

    args = ["measure", "--model", "llama-2-7b", "--fsdp", "2", "--optimizer", "muon"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "optimizer: 'muon' with --fsdp (expected adamw or adam; " in err
    assert "muon with --implementation huggingface" in err


def test_measure_fsdp_with_transformers_takes_muon_and_names_what_it_cannot_step(capsys):
    """`tiersim measure --fsdp 2 --implementation huggingface` steps AdamW, Adam, Muon or
    8-bit AdamW (tests/test_fsdp2_step.py measures them, 8-bit AdamW in bf16 too, on each
    rank's local shards); SGD it refuses before starting a rank, naming what it takes, exit 2.
    Its table names the optimizer stepped."""
    from tiersim.cli import main
    from tiersim.cli.commands.measure_fsdp import step_table

    args = ["measure", "--model", "llama-2-7b", "--fsdp", "2", "--implementation", "huggingface"]
    assert main([*args, "--optimizer", "sgd"]) == 2
    err = capsys.readouterr().err
    assert "optimizer: 'sgd' with --fsdp (expected adamw or adam or muon or adamw8bit)" in err
    got = {
        "world_size": 2,
        "configuration": {"dtype": "bf16", "optimizer": "muon", "seq_len": 128},
        "step_peak": {
            "measured_bytes": 5_007_880,
            "measured_phase": "backward",
            "predicted_bytes": 4_975_872,
            "predicted_moment": "backward: layer 1",
            "predicted_parts": {},
        },
    }
    assert "transformers' model, bf16, Muon and AdamW, seq_len 128 tokens" in step_table(got)
