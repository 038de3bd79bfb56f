"""Muon under DeepSpeed ZeRO with `training.deepspeed.reduce_scatter: false`
(state/deepspeed_muon.py, workload/data_parallel.py), by hand on a tiny Llama-like model:
hidden 64, FFN 128 (gated), 4 heads, 2 layers, its Muon group per layer q, k, v, o [64, 64],
gate and up [128, 64], down [64, 128] (nn.Linear's [out, in]); embedding and head AdamW's.

MuonWithAuxAdam sorts the group by shape, largest first: the 4 gate/up (8,192 values each),
the 2 down (8,192), the 8 attention projections (4,096): 81,920 values."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state import deepspeed_muon as ds_muon
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.workload.work import build_workload

MODEL = {
    "hidden": 64,
    "layers": 2,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 512,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
}
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}
SIZES = [8192] * 4 + [8192] * 2 + [4096] * 8


def _raw(zero: int, data: int, optimizer: str = "muon") -> dict:
    # reduce_scatter false: DeepSpeed refuses Muon with it true (test_deepspeed_muon_refusal.py)
    training = {"framework": "deepspeed", "seq_len": 128, "precision": BF16, "workspace": "0 B"}
    training |= {"optimizer": optimizer, "deepspeed": {"reduce_scatter": False}}
    # transformers' Llama (the HF Trainer's): q, k, v, o, gate, up, down apart, as SIZES and
    # the counts here take them (Megatron-DeepSpeed's fused ones: test_megatron_held.py)
    training["implementation"] = "huggingface"
    parallel = {"data": data, "zero_stage": zero}
    return {"name": "ds", "model": MODEL, "training": training, "parallel": parallel}


def _events(raw: dict, part: str) -> list[tuple[str, int, bool]]:
    r = resolve(scenario(raw))
    t = gpu_timeline(r, build_inventory(r))
    return [(e.moment, e.nbytes, e.alloc) for e in t.events if e.part == part]


def test_the_busiest_rank_holds_its_straddling_matrices_whole():
    # 3 ranks: 81,920 values padded to a multiple of 2 x 3 = 6: 81,924, partitions of 27,308.
    # rank 0 [0, 27308): the gate/up at 0, 8192, 16384 and the one at 24576 straddling its end:
    #   32,768 whole, 5,460 beyond; rank 1 [27308, 54616): from 24576 (straddling its start)
    #   to the projection at 53248 (starting inside): 57,344 - 24,576 = 32,768, 5,460 beyond;
    #   rank 2 [54616, 81924): from 53248: 28,672, 1,364 beyond
    assert ds_muon.beyond_partition(SIZES, 3) == 5_460
    # 2 ranks: partitions of 40,960 end where a tensor ends (the first down projection)
    assert ds_muon.beyond_partition(SIZES, 2) == 0
    assert ds_muon.muon_shapes(resolve(scenario(_raw(2, 3))), 0) == (
        [(128, 64)] * 4 + [(64, 128)] * 2 + [(64, 64)] * 8
    )


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_1_2_holds_the_momentum_and_the_updates_beyond_the_partition(zero):
    # 5,460 values x 2 B (bf16 gradients, DeepSpeed's grad_accum_dtype) = 10,920 B: the
    # momentum from the start (made at the first step, kept), the updates from the backward's
    # epilogue to the optimizer step, which flattens them and lets them go
    raw = _raw(zero, 3)
    assert _events(raw, ds_muon.MOMENTUM) == [("start of the step", 10_920, True)]
    epilogue = "backward: ZeRO's gradient epilogue"
    assert _events(raw, ds_muon.UPDATES) == [
        (epilogue, 10_920, True),
        ("optimizer step", 10_920, False),
    ]
    # the updates over the partition are new tensors made beside the gradients they replace
    # (grads_in_partition, let go at the epilogue's end): 27,308 values x 2 B = 54,616 B
    assert _events(raw, ds_muon.REPLACED) == [(epilogue, 54_616, True), (epilogue, 54_616, False)]


@pytest.mark.parametrize(
    "raw",
    [
        _raw(2, 3, optimizer="adamw"),
        _raw(2, 2),  # partitions end where tensors end: nothing beyond
    ],
    ids=["adamw", "aligned"],
)
def test_nothing_beyond_where_deepspeed_holds_nothing_more(raw):
    assert _events(raw, ds_muon.MOMENTUM) == []
    assert _events(raw, ds_muon.UPDATES) == []


def test_the_epilogue_s_peak_holds_the_partition_s_gradients_and_updates_at_once():
    # 2 ranks, ZeRO-2: partitions of 81,920 / 2 = 40,960 values end where tensors end (nothing
    # beyond); the updates of the rank's partition, 40,960 x 2 B = 81,920 B, are made while
    # its 81,920 B of gradients are held, then the gradients are let go; AdamW makes none
    epilogue = "backward: ZeRO's gradient epilogue"
    assert _events(_raw(2, 2), ds_muon.REPLACED) == [
        (epilogue, 81_920, True),
        (epilogue, 81_920, False),
    ]
    assert _events(_raw(2, 2, optimizer="adamw"), ds_muon.REPLACED) == []
    assert _events(_raw(3, 2), ds_muon.REPLACED) == []  # ZeRO-3 updates in place (param.grad)


def test_zero3_gathers_one_bucket_of_momenta_at_the_epilogue():
    # 2 ranks; the bucket (5e8) holds all 81,920 Muon values: gathered whole, and the rank's
    # clones of their partitions, ceil(size / 2) each: 40,960; in the momentum's dtype,
    # DeepSpeed's communication_data_type, bf16 with bf16 enabled (the weights' here), not
    # the fp32 of training.precision.optimizer: (81,920 + 40,960) x 2 B = 245,760 B, made and
    # let go at the epilogue
    epilogue = "backward: ZeRO's gradient epilogue"
    assert _events(_raw(3, 2), ds_muon.GATHERED) == [
        (epilogue, 245_760, True),
        (epilogue, 245_760, False),
    ]
    assert _events(_raw(3, 2, optimizer="adamw"), ds_muon.GATHERED) == []


def test_zero3_all_gathers_each_layer_s_muon_values_every_micro_batch():
    # a layer's Muon values: 4 x 4,096 + 3 x 8,192 = 40,960, and its 2 norm vectors of 64
    # (AdamW's): 41,088 values, 82,176 B of bf16 gradients. Per GPU over 2 ranks, in a ring:
    # - reduce_scatter false, the bucket all-reduced whole: 2 x (2 - 1) / 2 x 82,176 = 82,176 B
    #   (AdamW at DeepSpeed's default reduce-scatter: (2 - 1) / 2 x 82,176 = 41,088 B, half);
    # - Muon's three all-gathers, each (2 - 1) / 2 of the whole: the momentum twice and the
    #   update once, all bf16 (communication_data_type; param.grad): 40,960 x (2 + 2 + 2) / 2
    #   = 122,880 B, on the same stream as the all-reduce: 82,176 + 122,880 = 205,056 B
    muon = build_workload(resolve(scenario(_raw(3, 2)))).units[0]
    adamw = build_workload(resolve(scenario(_raw(3, 2, optimizer="adamw")))).units[0]
    scattered = _raw(3, 2, optimizer="adamw")
    scattered["training"]["deepspeed"]["reduce_scatter"] = True
    default = build_workload(resolve(scenario(scattered))).units[0]
    assert muon.muon_values == 40_960 and adamw.gradients_full == 82_176
    assert default.dp_gradients.nbytes == pytest.approx(41_088)
    assert adamw.dp_gradients.nbytes == pytest.approx(82_176)
    assert muon.dp_gradients.nbytes == pytest.approx(205_056)
    # ZeRO-1/2 gather nothing: every rank holds every averaged gradient after the all-reduce
    zero2 = build_workload(resolve(scenario(_raw(2, 2)))).units[0]
    assert zero2.dp_gradients.nbytes == pytest.approx(zero2.gradients_full)


def test_newton_schulz_s_set_is_three_m_by_n_and_four_m_by_m_in_bf16():
    # the compiled muon_update's plan (original_muon.py, inductor): X, a*X, the new X (bf16
    # m x n) beside A, b*A, c*A, B (bf16 m x m), m the smaller side. Measured on the CPU
    # (torch 2.13, profiler memory events, a 256 x 1024 fp32 gradient): 2,097,152 B =
    # 3 x 2 x 256 x 1024 (1,572,864) + 4 x 2 x 256 x 256 (524,288)
    assert ds_muon.newton_schulz_set(256, 1024) == 2_097_152
    # the tiny model's: gate/up [128, 64] and down [64, 128], m = 64: 3 x 2 x 8,192 + 4 x 2 x
    # 4,096 = 49,152 + 32,768 = 81,920 B; q/k/v/o [64, 64]: 24,576 + 32,768 = 57,344 B
    assert ds_muon.newton_schulz_set(128, 64) == ds_muon.newton_schulz_set(64, 128) == 81_920
    assert ds_muon.newton_schulz_set(64, 64) == 57_344


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_the_largest_matrix_s_newton_schulz_set_is_made_and_let_go_at_the_epilogue(zero):
    # DeepSpeed runs muon_update in the backward's epilogue (ZeRO-1/2 get_flat_partition;
    # ZeRO-3 after the bucket's all-reduce), not in the optimizer step: the largest matrix's
    # set, 81,920 B (above), made and let go there
    epilogue = "backward: ZeRO's gradient epilogue"
    assert _events(_raw(zero, 2), ds_muon.NEWTON_SCHULZ) == [
        (epilogue, 81_920, True),
        (epilogue, 81_920, False),
    ]
    assert _events(_raw(zero, 2, optimizer="adamw"), ds_muon.NEWTON_SCHULZ) == []


def test_zero3_s_newton_schulz_set_sits_beside_the_gathered_momenta():
    # _apply_distributed_muon_update runs muon_update while the bucket's momenta are
    # gathered (245,760 B, above): the set is made after them and let go before them
    r = resolve(scenario(_raw(3, 2)))
    order = [
        (e.part, e.alloc)
        for e in gpu_timeline(r, build_inventory(r)).events
        if e.part in (ds_muon.GATHERED, ds_muon.NEWTON_SCHULZ)
    ]
    assert order == [
        (ds_muon.GATHERED, True),
        (ds_muon.NEWTON_SCHULZ, True),
        (ds_muon.NEWTON_SCHULZ, False),
        (ds_muon.GATHERED, False),
    ]


def _optimizer_bytes(zero: int, gradients: str = "bf16", optimizer: str = "muon") -> int:
    raw = _raw(zero, 2, optimizer)
    raw["training"]["precision"] = BF16 | {"gradients": gradients}
    return build_inventory(resolve(scenario(raw))).per_gpu.by_class["optimizer"]


def test_deepspeed_keeps_muon_s_momentum_in_its_16_bit_dtype():
    # the model's Muon values 2 x 40,960 = 81,920; AdamW's: the embedding and the untied head
    # 2 x 512 x 64 = 65,536, 2 norms of 64 a layer and the final norm: 65,536 + 256 + 64 =
    # 65,856, two fp32 moments each (MuonWithAuxAdam's exp_avg / exp_avg_sq, zeros_like the
    # fp32 partition): 65,856 x 2 x 4 = 526,848 B; all over 2 ranks.
    # ZeRO-1/2: the momentum in gradient_accumulation_dtype (training.precision.gradients):
    # bf16 (81,920 x 2 + 526,848) / 2 = 345,344 B; fp32 gradients (81,920 x 4 + 526,848) / 2
    # = 427,264 B
    for zero in (1, 2):
        assert _optimizer_bytes(zero) == 345_344
        assert _optimizer_bytes(zero, gradients="fp32") == 427_264
    # ZeRO-3: in communication_data_type, bf16 with bf16 enabled whatever the gradients'
    assert _optimizer_bytes(3) == _optimizer_bytes(3, gradients="fp32") == 345_344
    # AdamW: two fp32 moments of every value, (81,920 + 65,856) x 8 / 2 = 591,104 B
    assert _optimizer_bytes(2, optimizer="adamw") == 591_104


@pytest.mark.parametrize("zero, runs", [(2, 1), (3, 4)])
def test_zero3_runs_newton_schulz_every_micro_batch(zero, runs):
    # one layer of hidden 512, FFN 1024, 4 micro-batches, 2 ranks; Newton-Schulz's 5
    # iterations on an m x n matrix (m <= n): 5 x (2m^2 n + 2m^3 + 2m^2 n) FLOPs.
    # q, k, v, o [512, 512]: 5 x 3 x 2 x 512^3 = 4,026,531,840 each, 16,106,127,360;
    # gate, up [1024, 512] and down [512, 1024], m 512, n 1024: 5 x (4 x 512^2 x 1024 +
    # 2 x 512^3) = 6,710,886,400 each, 20,132,659,200; the layer 36,238,786,560, each rank a
    # half: 18,119,393,280. ZeRO-1/2 run it once a step (get_flat_partition, at the
    # accumulation boundary); ZeRO-3 after each bucket's all-reduce, every micro-batch
    # (stage3.py 007cca6a). At the default machine's H200, dense bf16 989 TFLOP/s x its preset's
    # GEMM efficiency 0.803, the update's time, longer than its bytes' here
    raw = _raw(zero, 2)
    raw["model"] = MODEL | {"hidden": 512, "ffn_hidden": 1024, "layers": 1}
    raw["training"]["grad_accumulation"] = 4
    layer = build_workload(resolve(scenario(raw))).units[0]
    assert layer.optimizer_gpu_s == pytest.approx(runs * 18_119_393_280 / (989e12 * 0.803))
