"""DeepSpeed ZeRO++ (training.deepspeed.zero_hpz_partition_size, zero_quantized_weights,
zero_quantized_gradients; config/zeropp.py, state/zeropp.py, workload/zeropp.py): bytes by
hand from DeepSpeed's source (docs/zero-plus-plus.md), on GPT-2 small (124,439,808 parameters:
the preset's comment) over 16 GPUs, two DGX H100 nodes of 8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import merge, scenario

from tiersim.config.load import build
from tiersim.config.zeropp import zeropp_notes
from tiersim.core.errors import InputError
from tiersim.engine.simulate import simulate
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.write_deepspeed import write_deepspeed
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.zeropp import scale_groups, weight_gathers

BF16 = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}
BASE = {
    "name": "zeropp",
    "model": {"preset": "gpt2"},
    "training": {
        "framework": "deepspeed",
        "micro_batch_size": 4,
        "grad_accumulation": 2,
        "seq_len": 1024,
        "optimizer": "adamw",
        "precision": BF16,
    },
    "parallel": {"data": 16, "zero_stage": 3},
    "hardware": {"preset": "dgx-h100"},
}


def _raw(**deepspeed) -> dict:
    return merge(BASE, {"training": {"deepspeed": deepspeed}})


@pytest.fixture(scope="module")
def runs() -> dict:
    """One simulated step of each variant (about 0.3 s each)."""
    variants = {
        "base": {},
        "hpz": {"zero_hpz_partition_size": 8},
        "qwz": {"zero_quantized_weights": True},
        "qgz": {"zero_quantized_gradients": True},
    }
    return {k: simulate(scenario(_raw(**v))) for k, v in variants.items()}


def _bytes(result, channel: str) -> int:
    link = result.links.get(channel)
    return 0 if link is None else link.bytes_by_direction.get("data", 0)


def test_quantizer_groups_by_hand():
    # CUDAQuantizer.quantize: g from ceil(n / 8000) up to the first with n % (8g) == 0, then
    # doubled while n % (16g) == 0 and n / g > 8000.
    # 65,536: ceil = 9; 8g | 65,536 needs g a power of two: 16; 65,536 / 16 = 4,096 <= 8,000
    assert scale_groups(65_536) == 16
    # 1,000,000: ceil = 125 and 1,000,000 % 1,000 == 0; 1e6 / 125 = 8,000, not above 8,000
    assert scale_groups(1_000_000) == 125
    # GPT-2's MLP matrix, 768 x 3,072 = 2,359,296: ceil = 295; n / 8 = 294,912 = 2^15 x 9,
    # whose divisors from 295 up begin 384 (2^7 x 3); 2,359,296 / 384 = 6,144 <= 8,000
    assert scale_groups(2_359_296) == 384
    # 8,000,000: ceil = 1,000, 8e6 % 8,000 == 0; 8e6 % 16,000 == 0 but 8e6 / 1,000 = 8,000
    assert scale_groups(8_000_000) == 1_000


def test_layer_gathers_by_hand():
    # one GPT-2 layer: 12 h^2 + 13 h = 7,077,888 + 9,984 = 7,087,872 values, bf16
    # 14,175,744 B; d = 16 ranks, h = 8 (one node)
    params, full = 7_087_872, 14_175_744
    plain = weight_gathers(resolve(scenario(_raw())), params, full)
    # not through ZeRO++'s gathers without it (data_parallel.py's): asked directly, d-way
    assert plain["dp_weights"].nbytes == full * 15 / 16 == 13_289_760
    assert plain["dp_weights_secondary"] is None
    hpz = weight_gathers(resolve(scenario(_raw(zero_hpz_partition_size=8))), params, full)
    assert hpz["dp_weights"].nbytes == 13_289_760  # the first forward's, over the network
    assert hpz["dp_weights"].resource.channel == "network"
    # the secondary's, within the node: 14,175,744 x 7/8
    assert hpz["dp_weights_secondary"].nbytes == 12_403_776
    assert hpz["dp_weights_secondary"].resource.channel == "nvlink"
    qwz = _raw(zero_quantized_weights=True, zero_hpz_partition_size=8)
    both = weight_gathers(resolve(scenario(qwz)), params, full)
    # d-way: P = ceil(7,087,872 / 16) = 442,992 int8 a rank; its groups: ceil(P / 8000) = 56,
    # P / 8 = 55,374 = 2 x 3 x 11 x 839, first divisor from 56 up 66; P % (16 x 66) != 0:
    # 66 fp32 scales. Output 16 x (442,992 + 4 x 66) = 7,092,096 B, sent 15/16: 6,648,840
    assert scale_groups(442_992) == 66
    assert both["dp_weights"].nbytes == 6_648_840
    # h-way, the secondary partition: 16 x 442,992 / 8 = 885,984 a rank; ceil(/8000) = 111,
    # 885,984 / 8 = 110,748 = 2^2 x 3 x 11 x 839: 132; output 8 x (885,984 + 4 x 132) =
    # 7,092,096, sent 7/8: 6,205,584
    assert both["dp_weights_secondary"].nbytes == 6_205_584


def test_hpz_secondary_partition_in_the_weights_class():
    # GPT-2 small: 124,439,808 x 2 B = 248,879,616 B of bf16 weights; ZeRO-3's partition
    # ceil(/16) = 15,554,976 B; hpZ's secondary ceil(/8) = 31,109,952 B more
    base = build_inventory(resolve(scenario(_raw()))).per_gpu["weights"]
    hpz = build_inventory(resolve(scenario(_raw(zero_hpz_partition_size=8))))
    assert base == 15_554_976
    assert hpz.per_gpu["weights"] - base == 31_109_952
    # h above the world is the world (groups.py min(group_size, world_size)): ceil(/16) more
    whole = build_inventory(resolve(scenario(_raw(zero_hpz_partition_size=64))))
    assert whole.per_gpu["weights"] - base == 15_554_976


def test_hpz_moves_the_later_gathers_onto_nvlink(runs):
    base, hpz = runs["base"], runs["hpz"]
    moved = _bytes(base, "network") - _bytes(hpz, "network")
    # every gather hpZ moves sends the same buffer at 15/16 over the network and at 7/8 on
    # NVLink: the network loses 15/14 of what NVLink gains (one byte of rounding a flow)
    assert moved > 0
    assert abs(moved - _bytes(hpz, "nvlink") * 15 / 14) < 1_000
    # what stays on the network: the 2 micro-batches' reduce-scatters of the bf16 gradients
    # and the first forward's gather of every weight, 248,879,616 B each at 15/16:
    # 3 x 248,879,616 x 15/16 = 699,973,920
    assert _bytes(hpz, "network") == 699_973_920
    assert hpz.tiers["hbm"].peak_bytes - base.tiers["hbm"].peak_bytes == 31_109_952


def test_qwz_halves_the_weight_gathers_and_pays_the_scales(runs):
    base, qwz = runs["base"], runs["qwz"]
    assert _bytes(base, "nvlink") == _bytes(qwz, "nvlink") == 0
    # the reduce-scatters are untouched: 2 x 248,879,616 x 15/16 = 466,649,280 B in both
    scatters = 466_649_280
    share = (_bytes(qwz, "network") - scatters) / (_bytes(base, "network") - scatters)
    # int8 for bf16 is half; the fp32 scales add to it, 4 B a group as CUDAQuantizer picks
    # them: a layer's 442,992 a rank in 66 groups (+0.06 %), the embeddings' gather (wte, wpe,
    # ln_f: 39,385,344 values, 2,461,584 a rank; n / 8 = 307,698 = 2 x 3 x 51,283, a prime)
    # in 51,283 groups of 48 (+1/12)
    assert 0.5 < share < 0.5 * (1 + 1 / 12)


def test_qgz_nvlink_bytes_by_hand(runs):
    # GPT-2's 2-D tensors all have n % (2 x 16) == 0; the 1-D ones (biases, norms) fall back
    # to the reduce-scatter. Intra-node buffer n/2 + 4 max(rows, cols, 16), sent 7/8:
    # wte 50,257 x 768: 19,298,688 + 4 x 50,257 = 19,499,716
    # wpe 1,024 x 768: 393,216 + 4,096 = 397,312
    # a layer: c_attn 768 x 2,304: 884,736 + 9,216 = 893,952; attn c_proj 768 x 768:
    # 294,912 + 3,072 = 297,984; c_fc and mlp c_proj 768 x 3,072: 1,179,648 + 12,288 =
    # 1,191,936 each; 3,575,808 a layer, 42,909,696 for 12
    intra = 19_499_716 + 397_312 + 42_909_696
    assert intra == 62_806_724
    # every micro-batch (2): 2 x 62,806,724 x 7/8 = 109,911,767
    assert _bytes(runs["qgz"], "nvlink") == 109_911_767
    assert _bytes(runs["base"], "nvlink") == 0
    assert _bytes(runs["qgz"], "network") < _bytes(runs["base"], "network")


def _notes(raw: dict) -> str:
    return "\n".join(p.render("t") for p in zeropp_notes(scenario(raw)))


def test_settings_without_effect_are_said():
    at_two = merge(_raw(zero_hpz_partition_size=8, zero_quantized_weights=True),
                   {"parallel": {"zero_stage": 2}})  # fmt: skip
    said = _notes(at_two)
    assert "zero_hpz_partition_size: 8 has no effect: parallel.zero_stage is 2" in said
    assert "zero_quantized_weights: true has no effect" in said
    tp = merge(_raw(zero_quantized_weights=True), {"parallel": {"data": 8, "tensor": 2}})
    assert "not every GPU" in _notes(tp)
    one_node = merge(_raw(zero_quantized_gradients=True), {"parallel": {"data": 8}})
    assert "zero_quantized_gradients: true has no effect" in _notes(one_node)
    assert _notes(_raw(zero_hpz_partition_size=8)) == ""


@pytest.mark.parametrize(
    "deepspeed, where",
    [
        ({"zero_hpz_partition_size": 3}, "zero_hpz_partition_size"),  # 16 % 3 != 0
        ({"zero_quantized_gradients": True, "reduce_scatter": False}, "reduce_scatter"),
    ],
)
def test_what_deepspeed_refuses_exits_2(deepspeed, where):
    with pytest.raises(InputError) as refused:
        build(_raw(**deepspeed), Path("."), "t.yaml")
    assert f"training.deepspeed.{where}" in str(refused.value)
    assert "E-CONFLICT" in str(refused.value)


def test_import_maps_the_three_keys(tmp_path):
    zero = {"stage": 3, "zero_hpz_partition_size": 8, "zero_quantized_weights": True,
            "zero_quantized_gradients": True}  # fmt: skip
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}))
    imp = import_configs([path], ImportOptions(gpus=16, overrides=("model.preset=gpt2",)))
    ds = imp.loaded.scenario.training.deepspeed
    assert (ds.zero_hpz_partition_size, ds.zero_quantized_weights) == (8, True)
    assert ds.zero_quantized_gradients is True
    assert "not modelled" not in "\n".join(imp.note_lines())
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}}))
    off = import_configs([path], ImportOptions(gpus=16, overrides=("model.preset=gpt2",)))
    assert off.loaded.scenario.training.deepspeed.zero_hpz_partition_size == 1
    assert "hpZ off" in "\n".join(off.note_lines())


def test_emit_writes_them_back_under_deepspeeds_names():
    raw = _raw(zero_hpz_partition_size=8, zero_quantized_gradients=True)
    zero = json.loads(write_deepspeed(scenario(raw)).text)["zero_optimization"]
    assert zero["zero_hpz_partition_size"] == 8
    assert zero["zero_quantized_gradients"] is True
    assert "zero_quantized_weights" not in zero  # DeepSpeed's default false left to it
