"""DeepSpeed ZeRO++ qgZ's calls as DeepSpeed makes them (workload/zeropp.py `qgz_calls`,
`qgz_comm`, `qgz_bucket`; docs/zero-plus-plus.md). deepspeedai/DeepSpeed
comm/coalesced_collectives.py `all_to_all_quant_reduce` (17b3b557) loops over the tensors it is
given: a 1-D tensor, or one whose n does not divide by 2·W, goes to its own
`reduce_scatter_coalesced([tensor])`; every other one runs four `all_to_all_single` calls (the
int4 values, then the scales, within the node; the requantized values, then their scales,
across the nodes). stage3.py `__reduce_and_partition_ipg_grads` (007cca6a) hands a bucket's
every gradient to one `__avg_scatter_grads`, which makes that one call with the list: nothing
is coalesced. GPT-2 small over 16 GPUs, two DGX H100 nodes of 8 (tests/test_zeropp.py's)."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario
from test_zeropp import _raw

from tiersim.hardware.collectives import group_link
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s, call_latency_s
from tiersim.workload.work import build_workload
from tiersim.workload.zeropp import qgz_calls, qgz_comm, shapes_in

# a GPT-2 layer's tensors as tiersim lists them (q, k, v apart), (rows, cols or 0, n, count)
SQUARE = (768, 768, 589_824, 4)  # q, k, v, attention's c_proj
WIDE = (768, 3_072, 2_359_296, 2)  # c_fc, the MLP's c_proj
VECTORS = (768, 0, 768, 9)  # q, k, v, c_proj and mlp c_proj biases, two norms' weight and bias
FC_BIAS = (3_072, 0, 3_072, 1)


def test_a_layers_calls_and_bytes_by_hand():
    calls = qgz_calls([SQUARE, WIDE, VECTORS, FC_BIAS], 16, 8, 2.0)
    assert calls == [
        # 768 x 768: int4 values 589,824 / 2 = 294,912 B and G = max(768, 768, 16) = 768 fp32
        # scales 3,072 B within the node of 8; then 589,824 / (2 x 8) = 36,864 B and
        # 4 x (768 // 8) = 384 B across the 2 nodes
        ("intra", 4, 8, 294_912),
        ("intra", 4, 8, 3_072),
        ("inter", 4, 2, 36_864),
        ("inter", 4, 2, 384),
        # 768 x 3,072: 1,179,648 B, 4 x 3,072 = 12,288 B; 147,456 B, 4 x 384 = 1,536 B
        ("intra", 2, 8, 1_179_648),
        ("intra", 2, 8, 12_288),
        ("inter", 2, 2, 147_456),
        ("inter", 2, 2, 1_536),
        # 1-D: a reduce-scatter each over the 16, ceil(768 / 16) x 16 = 768 values of 2 B
        ("fallback", 9, 16, 1_536.0),
        ("fallback", 1, 16, 6_144.0),
    ]
    # 4 calls x 6 quantized tensors + 10 fallbacks = 34 calls a layer (tiersim priced 13)
    assert sum(count for _, count, _, _ in calls) == 34


def test_a_fallback_pads_to_a_multiple_of_w():
    # reduce_scatter_coalesced pads each tensor's partitions to ceil(n / W): 1,000 values over
    # 16 are 63 x 16 = 1,008 (2,016 B in bf16); 10 x 12 = 120 values is 2-D but 120 % 32 = 24,
    # so it falls back too: 8 x 16 = 128 values, 256 B
    calls = qgz_calls([(1_000, 0, 1_000, 1), (10, 12, 120, 1)], 16, 8, 2.0)
    assert calls == [("fallback", 1, 16, 2_016.0), ("fallback", 1, 16, 256.0)]


@pytest.fixture(scope="module")
def resolved():
    return resolve(scenario(_raw(zero_quantized_gradients=True)))


def test_every_call_pays_its_latency(resolved):
    r = resolved
    net = r.machine.network
    # one 1-D tensor of 768: one reduce-scatter over 16 ranks on the network (8 NICs a node:
    # 400 GB/s), a ring of 15 hops of 14 us = 210 us, and NCCL's shortfall at 0.9 of the rate:
    # 1,536 x 15/16 = 1,440 B sent, 1,440 / 400e9 x (1 / 0.9 - 1) = 0.0004 us
    one = qgz_comm(r, [(768, 0, 768, 1)], 2.0)
    assert one.nbytes == 1_440
    assert one.latency_s == pytest.approx(15 * 14e-6 + 1_440 / 400e9 * (1 / 0.9 - 1), rel=1e-9)
    # nine of them: nine calls, nine latencies
    assert qgz_comm(r, [(768, 0, 768, 9)], 2.0).latency_s == pytest.approx(9 * one.latency_s)
    # a 768 x 768 tensor: two NVLink all-to-alls, each its time alone (the measured NVLink
    # curve prices each buffer), and two network ones of one hop of 14 us each, their shortfall
    # at 50 GB/s (one NIC: the same local rank of each node) and 0.9
    local, across = group_link(net, 8, 1), group_link(net, 2, 8)
    intra = sum(
        call_latency_s(r, "all_gather", b, 8, local) + b * 7 / 8 / 450e9 for b in (294_912, 3_072)
    )
    inter = sum(14e-6 + b / 2 / 50e9 * (1 / 0.9 - 1) for b in (36_864, 384))
    square = qgz_comm(r, [(768, 768, 589_824, 1)], 2.0)
    assert square.latency_s == pytest.approx(intra + inter, rel=1e-9)
    assert square.nbytes == (36_864 + 384) / 2
    assert across.bandwidth == 50e9 and local.bandwidth == 450e9
    assert alone_s(r, square) > 2 * 14e-6


def test_a_piece_of_a_unit_holds_its_tensors_by_hand():
    # the layer in its backward's order (the listing reversed): the four norm vectors (0, 768,
    # 1,536, 2,304), the MLP c_proj bias (3,072), c_fc's bias (3,840), the MLP's two matrices
    # (6,912 and 2,366,208), ...; a bucket piece of the elements [0, 2,366,208) holds the
    # first eight of them, the rest of the layer the others
    listed = [(768, 768, 589_824, 4), WIDE, FC_BIAS, (768, 0, 768, 1), (768, 0, 768, 4)]
    total = 4 * 589_824 + 2 * 2_359_296 + 3_072 + 5 * 768
    first = shapes_in(listed, 0, 2_366_208, total, backward=True)
    assert sorted(first) == sorted([(768, 0, 768, 5), FC_BIAS, (768, 3_072, 2_359_296, 1)])
    rest = shapes_in(listed, 2_366_208, total, total, backward=True)
    assert sorted(rest) == sorted([(768, 768, 589_824, 4), (768, 3_072, 2_359_296, 1)])


BUCKET = {"reduce_bucket_size": 3_000_000}


def _buckets(raw: dict):
    wl = build_workload(resolve(scenario(raw)))
    return wl, [f for after in wl.gradient_buckets for f in after]


def test_the_bucket_carries_every_pieces_calls():
    # GPT-2's 124M parameters fit DeepSpeed's 5e8 bucket: one reduction a micro-batch, of 13
    # units' tensors. Network bytes a layer: quantized (4 x (36,864 + 384) + 2 x (147,456 +
    # 1,536)) / 2 = 223,488, fallback (9 x 768 + 3,072) x 2 x 15/16 = 18,720: 242,208; the
    # rest: wte 50,257 x 768 (38,597,376 / 16 + 4 x (50,257 // 8)) / 2 = (2,412,336 + 25,128)
    # / 2 = 1,218,732, wpe (49,152 + 512) / 2 = 24,832, the final norm 2 x 1,536 x 15/16 =
    # 2,880: 1,246,444; 12 x 242,208 + 1,246,444 = 4,152,940
    wl, flushes = _buckets(_raw(zero_quantized_gradients=True))
    assert len(flushes) == 1 and len(flushes[0].pieces) == 13
    assert flushes[0].comm.nbytes == 4_152_940
    # Megatron-DeepSpeed's GPT-2 layer (query_key_value [3h, h] one weight and one bias):
    # 4 matrices x 4 + 8 vectors = 24 calls (34 with q, k, v apart); 12 x 24 + the rest's
    # 2 x 4 + 2 = 298 calls, every one's latency: the units' own sum (each unit's reduction
    # is its tensors' calls; the bucket coalesces nothing)
    calls = [c for u in wl.units for c in qgz_calls(u.grad_shapes, 16, 8, 2.0)]
    assert sum(count for _, count, _, _ in calls) == 298
    units = sum(u.dp_gradients.latency_s for u in wl.units)
    assert flushes[0].comm.latency_s == pytest.approx(units, rel=1e-12)


def test_buckets_cutting_units_keep_every_call_once():
    # a 3e6-element bucket cuts the layers (7,087,872 elements) into pieces; qgZ coalesces
    # nothing, so the buckets' bytes and latencies add up to the one bucket's, each tensor's
    # calls counted once (before: a piece took its whole unit's latency)
    one = _buckets(_raw(zero_quantized_gradients=True))[1][0].comm
    cut = merge(_raw(zero_quantized_gradients=True), {"training": {"offload": BUCKET}})
    flushes = _buckets(cut)[1]
    assert len(flushes) > 13 and any(len(f.pieces) > 1 for f in flushes)
    assert sum(f.comm.nbytes for f in flushes) == pytest.approx(one.nbytes, rel=1e-12)
    assert sum(f.comm.latency_s for f in flushes) == pytest.approx(one.latency_s, rel=1e-12)


def test_submodule_parts_hold_their_own_tensors():
    # a 1e6 prefetch bucket fetches each layer as its submodules (each matrix with the vectors
    # after it): every part's qgZ calls are its own tensors', the layer's split among them
    raw = _raw(zero_quantized_gradients=True, stage3_prefetch_bucket_size=1_000_000)
    wl = build_workload(resolve(scenario(raw)))
    whole = build_workload(resolve(scenario(_raw(zero_quantized_gradients=True))))
    parts = [u for u in wl.units if u.name.startswith("L0.")]
    assert len(parts) > 1
    assert sum(sum(n * c for _, _, n, c in p.grad_shapes) for p in parts) == 7_087_872
    assert sum(p.params for p in parts) == 7_087_872
    layer = whole.units[0].dp_gradients
    assert sum(p.dp_gradients.nbytes for p in parts) == pytest.approx(layer.nbytes, rel=1e-12)
    latency = sum(p.dp_gradients.latency_s for p in parts)
    assert latency == pytest.approx(layer.latency_s, rel=1e-12)
