"""Storage versus compute precision (`training.precision.compute`).

FSDP2 mixed precision keeps fp32 sharded parameters (the master copy: weights fp32, master
none), all-gathers and computes in bf16 and holds the unsharded bf16 copy only while a unit
runs; DeepSpeed keeps bf16 parameters and a separate fp32 master. Llama-2-7B on 8 GPUs, ZeRO 3.
One layer: 4·4096² (q, k, v, o) + 3·4096·11008 (MLP) + 2·4096 (norms) = 202,383,360 values.
"""

from __future__ import annotations

from conftest import scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

LAYER = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
assert LAYER == 202_383_360


def llama(precision: dict, framework: str | None = None):
    raw = {
        "name": "p",
        # Megatron-LM's 0.1 dropouts, whose 1-byte masks the activations below count (the
        # preset, as Llama 2's config, carries none)
        "model": {"preset": "llama-2-7b", "attention_dropout": 0.1, "hidden_dropout": 0.1},
        "training": {"seq_len": 1024, "precision": precision, "framework": framework},
        "parallel": {"data": 8, "zero_stage": 3},
        "hardware": {"preset": "dgx-h100"},
    }
    return scenario(raw)


def test_fsdp_mixed_precision_rests_in_fp32_and_gathers_bf16():
    s = llama({"weights": "fp32", "gradients": "fp32", "master": "none", "compute": "bf16"}, "fsdp")
    layer = build_workload(resolve(s)).units[0]
    assert layer.homed["weights"] == LAYER * 4 // 8  # the fp32 shard at rest (4096 rows / 8)
    assert layer.homed["master"] == 0  # the fp32 shard is the master copy
    assert layer.weights_full == LAYER * 2  # the bf16 copy all-gathered and computed with
    # a ring all-gather sends (N-1)/N of the gathered bf16 buffer per GPU
    assert layer.dp_weights is not None and layer.dp_weights.nbytes == LAYER * 2 * 7 / 8


def test_fsdp_reduce_scatters_the_gradient_in_its_reduce_dtype():
    # FSDP2's MixedPrecisionPolicy (torch 2.13 _fsdp_collectives.py foreach_reduce): autograd's
    # gradient is bf16 (param_dtype), reduced in reduce_dtype, which tiersim reads from
    # training.precision.gradients (fsdpacc), and the reduced shard cast to the fp32 sharded
    # parameter's dtype after. A ring reduce-scatter sends (N-1)/N of the buffer: fp32 reduce
    # LAYER * 4 * 7/8, bf16 reduce LAYER * 2 * 7/8; the kept shard fp32 (4 B) either way.
    mixed = {"weights": "fp32", "gradients": "fp32", "master": "none", "compute": "bf16"}
    layer = build_workload(resolve(llama(mixed, "fsdp"))).units[0]
    assert layer.dp_gradients is not None and layer.dp_gradients.nbytes == LAYER * 4 * 7 / 8
    assert layer.homed["gradients"] == LAYER * 4 // 8  # the fp32 shard kept
    bf16_reduce = build_workload(resolve(llama({**mixed, "gradients": "bf16"}, "fsdp"))).units[0]
    assert bf16_reduce.dp_gradients.nbytes == LAYER * 2 * 7 / 8
    assert bf16_reduce.homed["gradients"] == LAYER * 4 // 8  # still the parameters' fp32
    generic = build_workload(resolve(llama(mixed))).units[0]
    assert generic.dp_gradients is not None and generic.dp_gradients.nbytes == LAYER * 4 * 7 / 8


def test_gemms_run_at_the_compute_precisions_peak():
    # dgx-h100: fp32 weights computed in bf16 take the bf16 peak, as bf16 weights do
    mixed = {"weights": "fp32", "gradients": "fp32", "master": "none", "compute": "bf16"}
    fp32_at_rest = build_workload(resolve(llama(mixed, "fsdp"))).units[0].forward_s
    assert (
        fp32_at_rest
        == build_workload(resolve(llama({"weights": "bf16"}, "fsdp"))).units[0].forward_s
    )


def test_deepspeed_rests_in_bf16_with_an_fp32_master():
    s = llama({"weights": "bf16", "gradients": "bf16", "master": "fp32"}, "deepspeed")
    wl = build_workload(resolve(s))
    parts = wl.units[: wl.parts_per_layer]  # DeepSpeed fetches a layer by its submodules
    assert wl.parts_per_layer > 1
    assert sum(u.homed["weights"] for u in parts) == LAYER * 2 // 8
    assert sum(u.homed["master"] for u in parts) == LAYER * 4 // 8
    assert sum(u.weights_full for u in parts) == LAYER * 2


def test_activations_follow_the_compute_copy_not_the_stored_weights():
    bf16 = build_inventory(resolve(llama({"weights": "bf16"}))).per_gpu["activations"]
    fsdp_mixed = {"weights": "fp32", "master": "none", "compute": "bf16"}
    assert build_inventory(resolve(llama(fsdp_mixed, "fsdp"))).per_gpu["activations"] == bf16
    fp32 = build_inventory(resolve(llama({"weights": "fp32", "master": "none"}))).per_gpu[
        "activations"
    ]
    # Korthikanti et al. per layer, s = 1024, b = 1, h = 4096, a = 32, f = 11008: values
    # 16sbh + 6sbf + 4as² bytes in bf16 (twice that in fp32), 1-byte masks 2sbh + as²
    s, h, a, f = 1024, 4096, 32, 11008
    values, masks = 16 * s * h + 6 * s * f + 4 * a * s * s, 2 * s * h + a * s * s
    assert bf16 == 32 * (values + masks)
    assert fp32 == 32 * (2 * values + masks)
