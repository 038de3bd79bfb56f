"""The all-stage pipeline timeline walked by its period (tiersim/workload/pipeline_blocks.py,
`steady_blocks` with `jump`, taken by `pipeline_steady.evaluate_steady`): the warm-up, the
steady blocks up to the first repetition and the cool-down walked, the periods between added.
Its step and finishes against the full walk of every micro-batch (`pipeline_timeline.evaluate`,
itself held to the dependency-graph walk to the bit by tests/test_pipeline_blocks.py) within a
relative 1e-12: round-off, the shift added q times instead of walked."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.state.resolved import resolve
from tiersim.workload import pipeline_blocks, pipeline_passes, pipeline_steady, stage_times
from tiersim.workload.pipeline_blocks import fits, steady_blocks, timeline_blocks
from tiersim.workload.pipeline_steady import REL, evaluate_steady
from tiersim.workload.pipeline_timeline import evaluate
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = [  # Korthikanti et al. 2022's Table 5, and Smith et al. 2022's 530B runs
    *(
        f"korthikanti2022-{size}-{recompute}"
        for size in ("22b", "175b", "530b", "1t")
        for recompute in ("full-recompute", "selective-sp")
    ),
    *(f"smith2022-mtnlg-530b-{nodes}nodes" for nodes in (280, 350, 420)),
]
WITHIN = 1e-12  # relative: the walk by its period is the full walk to round-off


def assert_like_the_full_walk(p, m, v, fwd, bwd, c) -> None:
    """evaluate_steady's step and finishes within WITHIN of every op walked; busy equal."""
    full, periodic = evaluate(p, m, v, fwd, bwd, c), evaluate_steady(p, m, v, fwd, bwd, c)
    assert periodic.step_s == pytest.approx(full.step_s, rel=WITHIN, abs=0.0)
    assert periodic.finish_s == pytest.approx(full.finish_s, rel=WITHIN, abs=0.0)
    assert periodic.busy_s == full.busy_s


@pytest.fixture(scope="module")
def published_stage_times() -> dict[str, list[tuple]]:
    """The (p, m, v, forward, backward, p2p) each published scenario's workload times its
    pipeline with (`stage_times.bubble`'s calls of `evaluate_steady`), by scenario."""
    seen: dict[str, list[tuple]] = {}
    with pytest.MonkeyPatch.context() as patch:
        for name in PUBLISHED:
            calls = seen.setdefault(name, [])

            def recording(p, m, v, fwd, bwd, p2p_s=0.0, calls=calls):
                calls.append((p, m, v, fwd, bwd, p2p_s))
                return evaluate_steady(p, m, v, fwd, bwd, p2p_s)

            patch.setattr(stage_times, "evaluate_steady", recording)
            path = ROOT / "scenarios" / "published" / f"{name}.yaml"
            build_workload(resolve(load_scenario(path, []).scenario))
    return seen


def test_every_published_pipeline_is_the_full_walk_to_round_off(published_stage_times):
    """Table 5's eight configurations (22B has one stage: no pipeline to time) and Smith's
    530B runs (1F1B, 35 stages, m = 160-240: not multiples of 35), each stage's own times."""
    timed = {name: calls for name, calls in published_stage_times.items() if calls}
    assert set(timed) == set(PUBLISHED) - {
        "korthikanti2022-22b-full-recompute",
        "korthikanti2022-22b-selective-sp",
    }
    for calls in timed.values():
        for args in calls:
            assert_like_the_full_walk(*args)


def test_530b_walks_its_warm_up_a_few_periods_and_its_cool_down(published_stage_times, monkeypatch):
    """530B (p 35, v 3, m 280) has blocks 1 - 105 = -104 to 280·3 + 35 - 2 = 873 (978). Its
    first repetition, block B against B - 105 (B - 105 >= p = 35, so B >= 140), is the one the
    full walk's ends show (`_repetition`: the same shift, to the bit); its steady blocks end
    before (280 - 35)·3 + 1 = 736, so the last steady block, 735, is the kept block
    b = 735 - 105·q in (B - 105, B] moved by q shifts (6 for any B in 140-174), and the walk
    goes on from 736: B + 105 + 138 blocks walked, 392 for B = 149, not 978 (nor the 453 of
    the thirteenth round, which landed on B + 5·105 and walked the 61 steady blocks to 735,
    nor the 663 of the 175 micro-batches walked before it). The repetition test is told
    the steady blocks from p = 35 on alone (`_Repetition.watched`), up to B."""
    walked: list[int] = []
    for name, at in (("rising", 2), ("ramp", 2), ("full", 2), ("drain", 2), ("falling", 3)):
        walk = getattr(pipeline_passes, name)

        def counting(*args, walk=walk, at=at):
            walked.append(args[at])  # the block each pass works out
            return walk(*args)

        monkeypatch.setattr(pipeline_passes, name, counting)
    told: list[int] = []
    see = pipeline_blocks._Repetition.see

    def seen(self, block, entry):
        told.append(block)
        return see(self, block, entry)

    monkeypatch.setattr(pipeline_blocks._Repetition, "see", seen)
    (p, m, v, fwd, bwd, c) = published_stage_times["korthikanti2022-530b-selective-sp"][0]
    assert (p, m, v) == (35, 280, 3)
    last, shift = steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True)
    walked_here, told_here = list(walked), list(told)  # (not the whole walk below)
    _, ends = timeline_blocks(p, m, v, fwd, bwd, c, False)
    assert shift is not None and shift == pipeline_steady._repetition(p, m, v, ends)
    b = next(x for x, y in pairwise(walked_here) if y != x + 1)
    assert 140 <= b <= 174
    assert walked_here == [*range(-104, b + 1), *range(736, 874)]
    assert len(walked_here) == b + 105 + 138
    assert told_here == list(range(35, b + 1))  # from p on, not after the jump
    assert last == pytest.approx([e[-1] for e in ends], rel=WITHIN, abs=0.0)


def test_530b_full_blocks_take_two_passes_to_the_bit(published_stage_times, monkeypatch):
    """530B's full blocks (every stage a forward and a backward, after a full block: blocks
    p = 35 to 280·3 - 105 = 735) are worked out in two passes (`pipeline_passes.full`); the
    walk reaches 35 to its first repetition B (140-174) that way, B - 34 blocks, and its ends
    and shift are
    those of every block taken op by op (`_block`, given each stage's last end: the block
    before's backward), to the bit."""
    (p, m, v, fwd, bwd, c) = published_stage_times["korthikanti2022-530b-selective-sp"][0]
    fast = steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True)
    full_blocks: list[int] = []
    block_by_block = pipeline_blocks._block

    def op_by_op(p, v, block, c, f_prev, b_prev, columns):
        full_blocks.append(block)
        times = pipeline_blocks._times(p, v, m * v, fwd, bwd)
        got = block_by_block(p, v, m * v, block, c, times, False, list(b_prev), f_prev, b_prev)
        return got[0], got[1]

    monkeypatch.setattr(pipeline_passes, "full", op_by_op)
    assert steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True) == fast
    assert full_blocks == list(range(35, full_blocks[-1] + 1))
    assert 140 <= full_blocks[-1] <= 174


SMALL = [  # (p, m, v, forward, backward, p2p): odd shapes, each stage its own times
    (4, 10, 1, [1.0, 1.5, 1.0, 2.5], [2.0, 3.0, 2.0, 4.5], 0.1),  # m not a multiple of p
    (3, 7, 1, 1.0, 2.0, 0.0),
    (5, 13, 1, [0.3, 0.1, 0.7, 0.2, 0.9], [0.6, 0.2, 1.1, 0.5, 2.0], 0.05),
    (2, 40, 4, 1.0, 2.0, 0.25),  # interleaved
    (4, 24, 2, [[1.0, 1.2], [0.9, 1.1], [1.0, 1.0], [1.3, 2.0]], 2.0, 0.0),  # uneven stages
    (6, 60, 3, [[0.5, 0.7, 0.6]] * 5 + [[0.5, 0.7, 1.9]], 1.4, 0.03),  # a heavier head
    (3, 9, 5, [[1.0] * 5, [3.0] * 5, [1.0] * 5], [[2.0] * 5, [1.0] * 5, [2.0] * 5], 0.5),
]


@pytest.mark.parametrize("args", SMALL)
def test_small_pipelines_are_the_full_walk_to_round_off(args):
    assert_like_the_full_walk(*args)


durations = st.sampled_from([0.5, 1.0, 1.5]) | st.floats(0.01, 3.0)


@settings(max_examples=150, deadline=None)
@given(p=st.integers(1, 6), v=st.integers(2, 4), groups=st.integers(3, 12), data=st.data())
def test_random_pipelines_walked_by_their_period_are_the_full_walk(p, v, groups, data):
    """Random interleaved shapes that the blocks order, each stage and chunk its own time
    (a few values, so periods repeat early, or any): the periodic walk's last ends against
    every block walked, and evaluate_steady against the full evaluation."""
    m = p * groups
    if not fits(p, m, v):
        return
    drawn = data.draw(st.sampled_from([durations, st.sampled_from([1.0, 2.0])]))
    fwd = [[data.draw(drawn) for _ in range(v)] for _ in range(p)]
    bwd = [[data.draw(drawn) for _ in range(v)] for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.25]) | st.floats(0.0, 2.0))
    last, _ = steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True)
    _, ends = timeline_blocks(p, m, v, fwd, bwd, c, False)
    assert last == pytest.approx([e[-1] for e in ends], rel=WITHIN, abs=0.0)
    assert_like_the_full_walk(p, m, v, fwd, bwd, c)


def test_530b_warm_up_and_cool_down_blocks_take_passes_to_the_bit(
    published_stage_times, monkeypatch
):
    """530B's blocks other than the full ones are worked out in passes too: forwards alone
    (the warm-up before block 0: -104 to -1, `rising`), every forward and the first
    backwards (0 to 34, `ramp`), the last forwards and every backward (after the last full
    block, 735: 736 to 769, `drain`), backwards alone (770 to 873, `falling`). Taken op by
    op instead (`_block`, given each stage's last end), the walk's last ends and shift are
    the same, to the bit."""
    (p, m, v, fwd, bwd, c) = published_stage_times["korthikanti2022-530b-selective-sp"][0]
    fast = steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True)
    times = pipeline_blocks._times(p, v, m * v, fwd, bwd)
    seen: dict[str, list[int]] = {"rising": [], "ramp": [], "drain": [], "falling": []}
    by_op = pipeline_blocks._block

    def rising(p, v, block, c, f_prev, columns):
        seen["rising"].append(block)
        return by_op(p, v, m * v, block, c, times, False, list(f_prev), f_prev, [0.0] * p)[0]

    def ramp(p, v, block, c, f_prev, b_prev, columns):
        seen["ramp"].append(block)
        free = f_prev[: p - block] + b_prev[p - block :]  # a backward before: its last op
        return by_op(p, v, m * v, block, c, times, False, free, f_prev, b_prev)[:2]

    def drain(p, v, block, r, c, f_prev, b_prev, columns):
        seen["drain"].append(block)
        return by_op(p, v, m * v, block, c, times, False, list(b_prev), f_prev, b_prev)[:2]

    def falling(p, v, total, block, c, free, b_prev, columns):
        seen["falling"].append(block)
        return by_op(p, v, total, block, c, times, False, free, [0.0] * p, b_prev)[1]

    for name, walk in (("rising", rising), ("ramp", ramp), ("drain", drain), ("falling", falling)):
        monkeypatch.setattr(pipeline_passes, name, walk)
    assert steady_blocks(p, m, v, fwd, bwd, c, REL, jump=True) == fast
    assert seen == {
        "rising": list(range(-104, 0)),
        "ramp": list(range(0, 35)),
        "drain": list(range(736, 770)),
        "falling": list(range(770, 874)),
    }
