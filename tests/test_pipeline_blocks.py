"""The interleaved timeline taken block by block (tiersim/workload/pipeline_blocks.py) against
the dependency-graph walk it replaces where every stage runs its full warm-up: the same
starts and ends to the bit, on random small shapes and on the stage times of every shipped
scenario that interleaves (so their reports cannot move)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.state.resolved import resolve
from tiersim.workload import pipeline_blocks, pipeline_steady, pipeline_timeline, stage_times
from tiersim.workload.pipeline import warmup_forwards
from tiersim.workload.pipeline_blocks import fits, steady_blocks, timeline_blocks
from tiersim.workload.pipeline_steady import evaluate_steady
from tiersim.workload.pipeline_timeline import timeline_graph
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parents[1]
# every shipped scenario with interleaving (parallel.virtual_pipeline > 1) but
# deepseek-v3-pp16-vp2, whose combined 1F1B (parallel.overlap_expert_comm) walks every op
# of its schedule, the warm-up's and cool-down's at their own times (pipeline_alone.py)
INTERLEAVED = [
    *(
        f"published/{name}.yaml"
        for name in (
            "korthikanti2022-175b-full-recompute",
            "korthikanti2022-175b-selective-sp",
            "korthikanti2022-530b-full-recompute",
            "korthikanti2022-530b-selective-sp",
            "narayanan2021-145.6b",
            "narayanan2021-310.1b",
            "narayanan2021-529.6b",
            "narayanan2021-76.1b",
            "nemo2407-gpt3-175b-128gpus",
            "nemo2407-gpt3-175b-512gpus",
            "nemo2407-llama2-13b-16gpus",
            "nemo2407-llama2-70b-64gpus",
            "nemo2407-llama3-70b-64gpus",
        )
    ),
]

times = st.sampled_from([0.0, 1.0, 2.0]) | st.floats(0.0, 3.0)


@settings(max_examples=200, deadline=None)
@given(
    p=st.integers(1, 7),
    v=st.integers(2, 4),
    groups=st.integers(1, 6),
    keep_starts=st.booleans(),
    data=st.data(),
)
def test_the_block_ordered_timeline_is_the_dependency_graph_walk(p, v, groups, keep_starts, data):
    m = p * groups
    if not fits(p, m, v):  # a warm-up cut short: the graph walk's alone
        assert m == p or (v + 1) * p - 2 > m * v
        return
    fwd = [[data.draw(times) for _ in range(v)] for _ in range(p)]
    bwd = [[data.draw(times) for _ in range(v)] for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.01]) | st.floats(0.0, 2.0))
    blocks = timeline_blocks(p, m, v, fwd, bwd, c, keep_starts)
    assert blocks == timeline_graph(p, m, v, fwd, bwd, c, keep_starts)


def test_fits_is_every_stage_running_its_full_warm_up():
    """`fits` where no stage's warm-up is cut to its m·v visits (`warmup_forwards`:
    min(2(p - k - 1) + (v - 1)p, m·v)); m = p is left to the graph walk."""
    for p in range(1, 9):
        for v in range(2, 5):
            for m in range(p, 8 * p + 1, p):
                full = m != p and all(
                    warmup_forwards(k, p, m, v) == 2 * (p - k - 1) + (v - 1) * p for k in range(p)
                )
                assert fits(p, m, v) == full, (p, m, v)


@pytest.fixture(scope="module")
def shipped_stage_times() -> list[tuple]:
    """The (p, m, v, forward, backward) each interleaved scenario's workload times its
    pipeline with (`stage_times.bubble`'s call of `evaluate_steady`)."""
    seen: list[tuple] = []

    def recording(p, m, v, fwd, bwd, p2p_s=0.0):
        seen.append((p, m, v, fwd, bwd, p2p_s))
        return evaluate_steady(p, m, v, fwd, bwd, p2p_s)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage_times, "evaluate_steady", recording)
        for name in INTERLEAVED:
            build_workload(resolve(load_scenario(ROOT / "scenarios" / name, []).scenario))
    return seen


def test_every_interleaved_scenario_is_timed_the_same_as_by_the_graph(
    shipped_stage_times, monkeypatch
):
    """The workload's evaluation and the whole step's schedule: with the blocks (every
    micro-batch's, the steady periods after the first repetition added: round-off, within
    a relative 1e-12; tests/test_pipeline_period.py) as with the graph walk (a shorter
    schedule, extrapolated), the same busy time, and the whole schedule's starts and ends
    to the bit; the blocks did time them (each fits)."""
    assert len(shipped_stage_times) == len(INTERLEAVED)
    fast = [evaluate_steady(*args) for args in shipped_stage_times]
    monkeypatch.setattr(pipeline_timeline, "fits", lambda p, m, v: False)
    monkeypatch.setattr(pipeline_steady, "fits", lambda p, m, v: False)  # every op's ends kept
    for args, got in zip(shipped_stage_times, fast, strict=True):
        p, m, v, fwd, bwd, c = args
        assert fits(p, m, v)
        graph = evaluate_steady(*args)
        assert got.busy_s == graph.busy_s
        assert got.step_s == pytest.approx(graph.step_s, rel=1e-12, abs=0.0)
        assert got.finish_s == pytest.approx(graph.finish_s, rel=1e-12, abs=0.0)
        assert timeline_blocks(p, m, v, fwd, bwd, c, True) == timeline_graph(
            p, m, v, fwd, bwd, c, True
        )


def graph_steady(p, m, v, fwd, bwd, c) -> tuple[list[float], float | None]:
    """What `evaluate_steady` reads of a schedule, from the graph walk's every end: each
    stage's last, and `_repetition` over all of them."""
    _, ends = timeline_graph(p, m, v, fwd, bwd, c, False)
    return [e[-1] for e in ends], pipeline_steady._repetition(p, m, v, ends)


@settings(max_examples=150, deadline=None)
@given(p=st.integers(1, 6), v=st.integers(2, 4), groups=st.integers(1, 7), data=st.data())
def test_the_blocks_let_go_as_walked_give_the_kept_ends_last_and_repetition(p, v, groups, data):
    """`steady_blocks` (each block's ends let go a period after it, the repetition found as
    the blocks come) against the graph walk's ends kept and `_repetition` run over them:
    the same last ends and the same shift (or none), to the bit. Times drawn from a few
    values repeat (a shift found), drawn freely often do not (none)."""
    m = p * groups
    if not fits(p, m, v):
        return
    few = st.sampled_from([0.5, 1.0, 1.5])
    drawn = data.draw(st.sampled_from([few, times]))
    fwd = [[data.draw(drawn) for _ in range(v)] for _ in range(p)]
    bwd = [[data.draw(drawn) for _ in range(v)] for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.25]) | st.floats(0.0, 2.0))
    got = steady_blocks(p, m, v, fwd, bwd, c, pipeline_steady.REL)
    assert got == graph_steady(p, m, v, fwd, bwd, c)


def test_the_shipped_schedules_repeat_the_same_when_let_go(shipped_stage_times):
    """Every interleaved scenario's shortest schedule (`evaluate_steady`'s first try): the
    same last ends and shift from `steady_blocks` as from the graph walk's ends, and a
    shift found in each (so the extrapolation, not a fallback, is what was compared)."""
    for p, m, v, fwd, bwd, c in shipped_stage_times:
        n = pipeline_steady._shortest(p, m, v, p)
        if n >= m:  # simulated in full: nothing extrapolated
            continue
        last, shift = steady_blocks(p, n, v, fwd, bwd, c, pipeline_steady.REL)
        assert shift is not None
        assert (last, shift) == graph_steady(p, n, v, fwd, bwd, c)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.integers(1, 4), st.integers(0, 90), st.data())
def test_each_visits_time_is_its_chunks(p, v, total, data):
    """The walk's tables (made by repeating one pattern of p·v visits): forward visit j runs
    chunk (j % p·v) // p, a backward the chunks in reverse, and each stage's time of a visit
    is its chunk's, visit by visit here; stages with equal times share one list."""
    times = st.sampled_from([1.0, 2.0]) | st.floats(0.0, 5.0)
    fwd = [[data.draw(times) for _ in range(v)] for _ in range(p)]
    bwd = [[data.draw(times) for _ in range(v)] for _ in range(p)]
    by_f, by_b, chunk_f, chunk_b = pipeline_blocks._times(p, v, total, fwd, bwd)
    assert chunk_f == [(j % (p * v)) // p for j in range(total)]
    assert chunk_b == [v - 1 - (j % (p * v)) // p for j in range(total)]
    for rows, by_visit, chunks in ((fwd, by_f, chunk_f), (bwd, by_b, chunk_b)):
        assert by_visit == [[row[chunks[j]] for j in range(total)] for row in rows]
        for a, b in itertools.combinations(range(p), 2):
            assert (by_visit[a] is by_visit[b]) == (rows[a] == rows[b])
