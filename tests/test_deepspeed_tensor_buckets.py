"""DeepSpeed's gradient bucket filled tensor by tensor (dsbucket2, issue 39;
tiersim/workload/gradient_buckets.py `tensor_flushes`, tiersim/workload/unit_tensors.py,
tiersim/engine/bucket_flush.py): a reduction goes out where the next parameter tensor's
gradient would overflow `reduce_bucket_size`, so a bucket boundary may fall inside a layer.

The case, by hand: a transformer of 2 layers, hidden 100, 4 heads, an ungated MLP of width
400, RMSNorm, no biases, untied 1000-token embedding and head, fp32, over 2 GPUs of a node.
A layer's tensors as listed (state/model.py `layer_matrices`): q, k, v, o 100 x 100 =
10,000 each, the MLP's up and down 100 x 400 = 40,000 each, two norms of 100: 120,200. Its
backward hands them over in reverse: 100, 100, 40,000, 40,000, 10,000 x 4. The rest: the
embedding 1000 x 100 = 100,000, the final norm 100, the head 100,000: 200,100, its backward
in reverse: head, norm, embedding. The backward runs the rest, then L1, then L0. A gradient
element is 4 B; a ring reduce-scatter over 2 ranks sends half: 2 B an element.

The bucket of 50,000 elements, filled in that order (a reduction where the next tensor
would make more than 50,000):
  B1 head 100,000 (larger than the bucket: alone)            rest [0, 100000)
  B2 norm 100 (the embedding next would overflow)            rest [100000, 100100)
  B3 embedding 100,000 (alone)                               rest [100100, 200100)
  B4 L1's 100 + 100 + 40,000 = 40,200 (+40,000 would be 80,200)    L1 [0, 40200)
  B5 L1's 40,000 + 10,000 = 50,000 (not more; +10,000 would be)     L1 [40200, 90200)
  B6 L1's 3 x 10,000, then L0's 100 + 100 = 30,200 (+40,000 over)   L1 [90200, 120200),
                                                                    L0 [0, 200)
  B7 L0's 40,000 (+40,000 over)                              L0 [200, 40200)
  B8 L0's 40,000 + 10,000                                    L0 [40200, 90200)
  B9 L0's 3 x 10,000, the epilogue's                         L0 [90200, 120200)
Each is issued after the backward of the unit that put its last gradient in: B1-B3 after
the rest's, B4 and B5 after L1's, B6-B9 after L0's. At unit grain (dsbucket) every unit is
larger than the bucket: three reductions, one a unit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import scenario, tiny

from tiersim.config.load import load_scenario
from tiersim.engine.ops import OpKind
from tiersim.engine.schedule import build_schedule
from tiersim.engine.simulate import prepare
from tiersim.runner import simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.gradient_buckets import tensor_flushes
from tiersim.workload.unit_tensors import consecutive
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parents[1]
L0, L1, REST = 0, 1, 2
PLAN = [  # (pieces, bytes) of B1..B9 (module docstring), 2 B an element
    (((REST, 0, 100_000),), 200_000),
    (((REST, 100_000, 100_100),), 200),
    (((REST, 100_100, 200_100),), 200_000),
    (((L1, 0, 40_200),), 80_400),
    (((L1, 40_200, 90_200),), 100_000),
    (((L1, 90_200, 120_200), (L0, 0, 200)), 60_400),
    (((L0, 200, 40_200),), 80_000),
    (((L0, 40_200, 90_200),), 100_000),
    (((L0, 90_200, 120_200),), 60_000),
]
ISSUED_AFTER = ["rest"] * 3 + ["L1"] * 2 + ["L0"] * 4
ALL_BYTES = (200_100 + 2 * 120_200) * 2  # 881,000: every gradient element once


def _raw(bucket: int, stage: int = 2, **offload) -> dict:
    raw = tiny(
        training={
            "framework": "deepspeed",
            "offload": {"reduce_bucket_size": bucket, **offload},
        },
        parallel={"data": 2, "zero_stage": stage},
        hardware={
            "network": {
                "gpus_per_node": 8,
                "intra_node_bandwidth": "1 GB/s",
                "intra_node_latency": "0 us",
            }
        },
        simulation={"link_sharing": "ordered"},
    )
    raw["model"] = {
        "layers": 2,
        "hidden": 100,
        "heads": 4,
        "ffn_hidden": 400,
        "vocab": 1000,
        "max_positions": 64,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": False,
        "tied_embeddings": False,
    }
    return raw


def _flushes(raw) -> list[tuple[str, tuple, float, int]]:
    """Every bucket reduction in issue order: (after whose backward, pieces, bytes, held)."""
    wl = build_workload(resolve(scenario(raw)))
    order = [REST, L1, L0] if len(wl.units) == 3 else range(len(wl.units) - 1, -1, -1)
    return [
        (wl.units[u].name, f.pieces, f.comm.nbytes, f.held)
        for u in order
        for f in wl.gradient_buckets[u]
    ]


def test_the_rule_over_tensors_cuts_a_unit_between_buckets():
    # bucket 6; unit 0's tensors 3, 2, unit 1's 1, 4, unit 2's 5 in arrival order:
    # 3 + 2 = 5, + 1 = 6 (not > 6); the next 4 would make 10: {u0 [0, 5), u1 [0, 1)};
    # then 4; the next 5 would make 9: {u1 [1, 5)}; then 5, the end: {u2 [0, 5)}
    assert tensor_flushes([[3, 2], [1, 4], [5]], 6) == [
        ((0, 0, 5), (1, 0, 1)),
        ((1, 1, 5),),
        ((2, 0, 5),),
    ]
    # a unit with no tensors takes no part; one tensor larger than the bucket goes alone
    assert tensor_flushes([[2], [], [9, 1]], 6) == [((0, 0, 2),), ((2, 0, 9),), ((2, 9, 10),)]


def test_submodules_and_tiles_cut_a_layers_tensors_where_their_parameters_end():
    # tensors 3, 5, 2 (10 elements) into parts of 4 and 6: the 5 is tiled 1 + 4
    assert consecutive([3, 5, 2], [4, 6]) == [[3, 1], [4, 2]]
    assert consecutive([3, 5, 2], [3, 7]) == [[3], [5, 2]]
    assert consecutive([3, 5, 2], [10]) == [[3, 5, 2]]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_bucket_of_50000_elements_by_hand(stage):
    # ZeRO-1 (one micro-batch: its boundary's reduction), 2 and 3 alike: reduce-scatters of
    # 2 B an element; the held bytes are the two tensors larger than the bucket, 4 B each
    got = _flushes(_raw(50_000, stage))
    assert [(name, pieces, nbytes) for name, pieces, nbytes, _ in got] == [
        (name, pieces, nbytes) for name, (pieces, nbytes) in zip(ISSUED_AFTER, PLAN, strict=True)
    ]
    assert [held for *_, held in got] == [400_000, 0, 400_000] + [0] * 6
    assert sum(nbytes for _, _, nbytes, _ in got) == ALL_BYTES


def test_the_same_tensors_in_zero3_submodules_cross_the_same_boundaries():
    # prefetch_bucket_size 30,000 cuts each layer into DeepSpeed submodules (workload/fetch.py:
    # each matrix a module, the norms joined to the MLP's down projection before them,
    # consecutive modules up to 30,000): q + k + v 30,000 | o 10,000 | up 40,000 |
    # down + norms 40,200; units L0.0-L0.3 (0-3), L1.0-L1.3 (4-7), rest (8); backward the
    # rest, L1.3 ... L1.0, L0.3 ... L0.0. The buckets are B1..B9 again, each after the
    # submodule that put its last gradient in: B4 is L1.3 whole; B5 L1.2 (up) and L1.1
    # (o) whole, after L1.1; B6 L1.0 (30,000) and L0.3's two norms, after L0.3; B7 the rest
    # of L0.3; B8 L0.2 and L0.1 after L0.1; B9 L0.0
    got = _flushes(_raw(50_000, 3, prefetch_bucket_size=30_000))
    assert [(name, pieces, nbytes) for name, pieces, nbytes, _ in got] == [
        ("rest", ((8, 0, 100_000),), 200_000),
        ("rest", ((8, 100_000, 100_100),), 200),
        ("rest", ((8, 100_100, 200_100),), 200_000),
        ("L1.3", ((7, 0, 40_200),), 80_400),
        ("L1.1", ((6, 0, 40_000), (5, 0, 10_000)), 100_000),
        ("L0.3", ((4, 0, 30_000), (3, 0, 200)), 60_400),
        ("L0.3", ((3, 200, 40_200),), 80_000),
        ("L0.1", ((2, 0, 40_000), (1, 0, 10_000)), 100_000),
        ("L0.0", ((0, 0, 30_000),), 60_000),
    ]


def test_whole_units_in_a_bucket_are_the_unit_grain_plan():
    # a bucket larger than the stage's gradients: one reduction of everything after L0's
    # backward, the units whole, as at unit grain
    assert _flushes(_raw(10**12)) == [
        ("L0", ((REST, 0, 200_100), (L1, 0, 120_200), (L0, 0, 120_200)), 881_000, 0)
    ]


def test_the_schedule_issues_each_bucket_after_its_backward_and_frees_what_it_holds():
    raw = _raw(50_000, overlap_comm=True)
    res = resolve(scenario(raw))
    setup = prepare(res, build_inventory(res))
    ops = build_schedule(res, setup.wl, 1, setup.depth).ops
    reductions = [i for i, op in enumerate(ops) if op.label == "dp gradients"]
    assert [ops[i].nbytes for i in reductions] == [nbytes for _, nbytes in PLAN]
    issued = [ops[i].deps[0] for i in reductions]
    assert [ops[d].label for d in issued] == [f"backward {n} mb0" for n in ISSUED_AFTER]
    # the rest's backward lets go of what was copied into the bucket: its 800,400 B of
    # gradients but the head's and the embedding's 400,000 B each, which B1 and B3 free when
    # they end (ZeRO-2 keeps the reduced shard on the GPU); the layers' tensors all fit:
    # their 120,200 x 4 = 480,800 B freed at their backward's end
    rest_bwd, l1_bwd, l0_bwd = (ops[d] for d in (issued[0], issued[3], issued[5]))
    assert rest_bwd.free == (("hbm", 400),)
    assert ("hbm", 480_800) in l1_bwd.free and ("hbm", 480_800) in l0_bwd.free
    big = (("hbm", 400_000),)
    assert [ops[i].free for i in reductions] == [big, (), big, (), (), (), (), (), ()]
    # each unit ready once every bucket that carried part of it is done
    joins = {op.label: set(op.deps) for op in ops if op.kind is OpKind.JOIN}
    assert joins == {
        "gradient buckets of rest mb0": set(reductions[0:3]),
        "gradient buckets of L1 mb0": set(reductions[3:6]),
        "gradient buckets of L0 mb0": set(reductions[5:9]),
    }
    # overlap_comm's two ipg buffers (engine/reduce_depth.py, bound 1) count buckets: each
    # of the 8 after the first waits for the one before
    waits = [op for op in ops if op.label.startswith("wait for gradient reduction")]
    assert [op.deps[0] for op in waits] == reductions[:-1]


@pytest.mark.parametrize("bucket", [1, 25_000, 50_000, 10**12])
def test_the_bytes_on_the_link_are_every_gradient_once_at_every_bucket_size(bucket):
    # the 881,000 B of reduce-scatters, then each unit's updated half all-gathered, 2 B an
    # element again: 1,762,000 B, exactly, however the buckets cut the units
    r = simulate(scenario(_raw(bucket, overlap_comm=True)))
    assert r.links["nvlink"].bytes_by_direction == {"data": 2 * ALL_BYTES}


def test_a_shipped_scenarios_buckets_carry_every_gradient_element_once():
    # ZeRO-Offload's 10B model (scenarios/zero-offload-10b-dgx2.yaml: ZeRO-2, DeepSpeed's
    # 5e8-element bucket, layers of 201,379,840 elements on each GPU): the buckets cut
    # layers, and every unit's elements go out once, in order, in buckets whose bytes add
    # up to the units' own reductions' exactly
    res = resolve(load_scenario(ROOT / "scenarios" / "zero-offload-10b-dgx2.yaml").scenario)
    wl = build_workload(res)
    pieces: dict[int, list[tuple[int, int]]] = {}
    for after in wl.gradient_buckets:
        for f in after:
            assert sum(b - a for _, a, b in f.pieces) <= 500_000_000 or len(f.pieces) == 1
            for u, a, b in f.pieces:
                pieces.setdefault(u, []).append((a, b))
    reduced = [u for u, unit in enumerate(wl.units) if unit.dp_gradients is not None]
    assert sorted(pieces) == reduced
    for u, spans in pieces.items():
        spans.sort()
        assert spans[0][0] == 0 and spans[-1][1] == wl.units[u].params
        assert all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))
    assert any(len(spans) > 1 for spans in pieces.values())  # a boundary inside a layer
    total = sum(f.comm.nbytes for after in wl.gradient_buckets for f in after)
    assert total == sum(wl.units[u].dp_gradients.nbytes for u in reduced)
