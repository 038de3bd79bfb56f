"""Muon's Newton-Schulz on FSDP2's sharded weights (state/muon_sharded.py): each matrix's
transients, gathers and FLOPs on one rank, by hand; then measured, torch.optim.Muon (torch
2.13) stepping one `fully_shard` weight on 2 and 4 gloo CPU ranks
(groundtruth/muon_dtensor.py): the transients' peak within 3 %, the collectives and the
matmuls' FLOPs exact; and the step's timeline and time under `framework: fsdp`."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.muon_sharded import ShardedNewtonSchulz, temporary_bytes


def test_a_wide_matrix_is_gathered_whole_by_hand():
    """128 x 512 (out <= in: no transpose), 2 ranks, fp32 state: the rank's 64 rows. U, the
    update, 4 x 64 x 512 = 131,072; X, its bf16 copy, 65,536; g, the rank's 64 rows of the
    128 x 128 Gram matrix, 2 x 64 x 128 = 16,384; G, X whole, 2 x 128 x 512 = 131,072. CPU, at
    B·X: U + 2X (the old and new X) + 2g + 2G (X gathered, oneDNN's packed copy) = 131,072 +
    131,072 + 32,768 + 262,144 = 557,056. GPU: U + 2X + 2G (X Xᵀ's transposed copy and the
    concatenated gather) = 524,288, above B·X's U + 2X + 2g + G = 425,984."""
    ns = ShardedNewtonSchulz(128, 512, 2)
    assert ns.gathers
    assert ns.temporary_bytes(4, "cpu") == 557_056
    assert ns.temporary_bytes(4, "cuda") == 524_288
    # 5 iterations x (X twice, 2 x 131,072, and the Gram matrix, 2 x 128², 32,768)
    assert ns.gathered_bytes() == 5 * (2 * 131_072 + 32_768) == 1_474_560
    assert ns.all_reduced_bytes() == 0
    # every matmul on the rank's rows: 5 x (4 x 128² x 512 + 2 x 128³) / 2
    assert ns.flops() == 5 * (4 * 128**2 * 512 + 2 * 128**3) / 2 == 94_371_840


def test_a_tall_matrix_all_reduces_its_gram_matrix_by_hand():
    """512 x 128 (out > in: transposed, X is [128, 512] cut along 512), 2 ranks, fp32: U = 4 x
    256 x 128 = 131,072, X = 65,536, R, the Gram matrix whole, 2 x 128² = 32,768. CPU: U + 3X +
    3R = 131,072 + 196,608 + 98,304 = 425,984; GPU: U + 2X + 3R = 360,448. No gather; 2
    all-reduces of R an iteration; A + A·A whole on every rank."""
    ns = ShardedNewtonSchulz(512, 128, 2)
    assert not ns.gathers
    assert ns.temporary_bytes(4, "cpu") == 425_984
    assert ns.temporary_bytes(4, "cuda") == 360_448
    assert ns.gathered_bytes() == 0
    assert ns.all_reduced_bytes() == 5 * 2 * 32_768
    assert ns.flops() == 5 * (4 * 128**2 * 512 / 2 + 2 * 128**3) == 104_857_600


def test_a_shape_of_unknown_orientation_takes_the_larger_transients():
    """tiersim's Matrix(64, 128) is a Llama MLP's gate, up (128 x 64 in PyTorch) and down (64 x
    128), 2 ranks, bf16 state. Gathering (64 x 128): U 8,192 + 2X 16,384 + 2g 2 x 2 x 32 x 64
    = 8,192 + 2G 2 x 16,384 = 65,536 on the CPU; transposed (128 x 64): U 8,192 + 3X 24,576 +
    3R 3 x 8,192 = 57,344. A square matrix is never transposed."""
    assert temporary_bytes(64, 128, 2, 2, "cpu") == 65_536
    assert temporary_bytes(128, 64, 2, 2, "cpu") == 65_536
    # 64 x 64: U 4,096 + 2X 8,192 + 2g 2 x 4,096 + 2G 2 x 8,192 = 36,864
    assert temporary_bytes(64, 64, 2, 2, "cpu") == 36_864


# --- measured -----------------------------------------------------------------------------------

# (rows, cols, dtype): gathered (out <= in), all-reduced (out > in), square
JOBS = [(128, 512, "fp32"), (512, 128, "bf16"), (256, 256, "bf16")]


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def stepped(request):
    pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    from tiersim.groundtruth.muon_dtensor import record_muon_steps

    return request.param, record_muon_steps(JOBS, request.param)


@pytest.mark.parametrize("job", range(len(JOBS)), ids=lambda j: "x".join(map(str, JOBS[j])))
def test_muon_on_sharded_weights_as_measured(stepped, job):
    """Measured (torch 2.13 CPU, gloo): every free seen; 15 all-gathers (3 an iteration) and
    X's norm's all-reduce where out <= in, 11 all-reduces (the norm's, 2 an iteration) where
    out > in; the local matmuls' FLOPs (the profiler's) as the model's; the transients' peak
    within 3 % (oneDNN's 5,120 B beside each packed copy not counted: -0.0 % to -2.2 % when
    written)."""
    world, steps = stepped
    rows, cols, dtype = JOBS[job]
    got = steps[job]
    assert got.left_bytes == 0
    expected = {"all_reduce": 1, "all_gather": 15} if rows <= cols else {"all_reduce": 11}
    assert got.collectives == expected
    ns = ShardedNewtonSchulz(rows, cols, world)
    assert got.matmul_flops == ns.flops()
    predicted = ns.temporary_bytes({"fp32": 4, "bf16": 2}[dtype], "cpu")
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


def test_the_gathers_are_timed_on_the_data_parallel_link():
    """Llama-2-7B under FSDP2 over 8 H100s with Muon: a layer's update is its Newton-Schulz
    FLOPs on the rank's rows (1/8) plus its all-gathers: q, k, v, o 4096 x 4096 and gate, up,
    down 4096 x 11008 (each as gathered), 5 iterations of X twice and the Gram matrix in bf16,
    15 collectives a matrix, on the data-parallel link."""
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
    attention = 4 * 5 * 6 * h**3
    mlp = 3 * 5 * (4 * h**2 * f + 2 * h**3)
    rate = r.machine.gpu.peak_flops["bf16"] * r.machine.gpu.efficiency
    gathered = 4 * 5 * 2 * (2 * h * h + h * h) + 3 * 5 * 2 * (2 * h * f + h * h)
    calls = 7 * 15
    gathers_s = alone_s(r, comm(r, "gathers", "data", "all_gather", gathered / calls, calls))
    assert gathers_s > 0.01  # 5.2 GB gathered on each rank, a layer
    assert layer.optimizer_gpu_s == pytest.approx((attention + mlp) / 8 / rate + gathers_s)


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
    8-bit AdamW (tests/test_fsdp2_step.py measures them); 8-bit AdamW in bf16 (the default
    dtype: torchao's refuses 16-bit DTensors) and SGD it refuses before starting a rank,
    naming what it takes, exit 2. Its table names the optimizer stepped."""
    from tiersim.cli import main
    from tiersim.cli.commands.measure_fsdp import step_table

    args = ["measure", "--model", "llama-2-7b", "--fsdp", "2", "--implementation", "huggingface"]
    assert main([*args, "--optimizer", "adamw8bit"]) == 2
    err = capsys.readouterr().err
    assert "--dtype: bf16 with --fsdp and adamw8bit: torchao's AdamW8bit" in err
    assert "(expected fp32)" in err
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
