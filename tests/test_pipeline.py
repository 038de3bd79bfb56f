"""Pipeline schedules: bubble fractions, Megatron's operation order, and step times.

Bubble fractions are Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", §2.2.1-§2.2.2); orders follow Megatron-LM's
`forward_backward_pipelining_without_interleaving` / `_with_interleaving`; timelines are
written out by hand. The closed form is checked against the all-stage evaluation.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.state.inventory import inflight_microbatches
from tiersim.workload.pipeline import (
    Op,
    bubble_fraction,
    bubble_s,
    bubble_share,
    peak_inflight,
    stage_schedule,
    step_time,
)
from tiersim.workload.pipeline_steady import evaluate_steady, exposed_p2p_s
from tiersim.workload.pipeline_timeline import evaluate


def F(mb: int, chunk: int = 0) -> Op:
    return Op(mb, chunk, "forward")


def B(mb: int, chunk: int = 0) -> Op:
    return Op(mb, chunk, "backward")


# --- bubble fractions --------------------------------------------------------------------------


def test_bubble_fraction_1f1b():
    # Narayanan et al. 2021 §2.2.1: t_pb / t_id = (p - 1) / m
    assert bubble_fraction(8, 64) == pytest.approx(7 / 64)
    # The 1T row of Table 1 (p = 64, m = 3072 / 6 = 512): 63 / 512
    assert bubble_fraction(64, 512) == pytest.approx(0.123046875)


def test_bubble_fraction_interleaved():
    # §2.2.2: the interleaved schedule divides it by v: (1/v)·(p - 1)/m
    assert bubble_fraction(8, 64, virtual=3) == pytest.approx(7 / 192)
    # 530B row of Table 1 (p = 35, v = 3, m = 2520 / 9 = 280): 34 / 840
    assert bubble_fraction(35, 280, virtual=3) == pytest.approx(34 / 840)


def test_bubble_share_of_wall_clock():
    # the same bubble as a share of the step: (p - 1) / (v·m + p - 1); 63 / 575 for the 1T run
    assert bubble_share(64, 512) == pytest.approx(63 / 575)
    assert bubble_share(1, 10) == 0.0


def test_interleaving_needs_micro_batches_in_multiples_of_stages():
    with pytest.raises(ValueError, match=r"micro_batches\(=6\).*pipeline\(=4\)"):
        stage_schedule(0, 4, 6, virtual=2)


# --- the order of operations, p = 2, m = 4 -----------------------------------------------------


def test_1f1b_order_p2_m4():
    # stage 0 warms up with p - 0 - 1 = 1 forward, stage 1 with none; then one forward, one
    # backward; the first stage drains its last backwards.
    assert stage_schedule(0, 2, 4) == [F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)]
    assert stage_schedule(1, 2, 4) == [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]


def test_interleaved_order_p2_m4_v2():
    # Stage 0 warms up with (p - 0 - 1)·2 + (v - 1)·p = 4 forwards, stage 1 with 2. The k-th
    # forward is micro-batch (k // 4)·2 + k % 2 on chunk (k % 4) // 2; backwards run the chunks
    # in reverse.
    assert stage_schedule(0, 2, 4, virtual=2) == [
        F(0, 0), F(1, 0), F(0, 1), F(1, 1),  # warm-up
        F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0),  # steady
        B(2, 1), B(3, 1), B(2, 0), B(3, 0),  # cool-down
    ]  # fmt: skip
    assert stage_schedule(1, 2, 4, virtual=2) == [
        F(0, 0), F(1, 0),
        F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0), F(3, 0), B(1, 0),
        F(2, 1), B(2, 1), F(3, 1), B(3, 1),
        B(2, 0), B(3, 0),
    ]  # fmt: skip


def _megatron_order(stage: int, p: int, m: int, v: int) -> list:
    """Megatron-LM's order written out op by op (forward_backward_pipelining_with_
    interleaving, get_model_chunk_id): warm-up forwards, then forward w + i before backward
    i, then the cool-down's backwards; visit k is micro-batch (k // p·v)·p + k % p through
    chunk (k % p·v) // p, a backward through the chunks in reverse."""
    # Megatron-Core @ 00611e6eeb0b, get_pp_rank_microbatches: no all-warm-up case at m = p
    w = min(p - stage - 1, m) if v == 1 else min((p - stage - 1) * 2 + (v - 1) * p, m * v)

    def visit(k: int, kind: str):
        chunk = (k % (p * v)) // p
        return Op(k // (p * v) * p + k % p, chunk if kind == "forward" else v - 1 - chunk, kind)

    ops = [visit(k, "forward") for k in range(w)]
    for i in range(m * v - w):
        ops.append(visit(w + i, "forward"))
        ops.append(visit(i, "backward"))
    return ops + [visit(k, "backward") for k in range(m * v - w, m * v)]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.integers(1, 12), st.data())
def test_the_order_is_megatrons_op_by_op(p, v, groups, data):
    # the order is built by slices (pipeline.in_order) from each kind's visits made in
    # C-level passes; every op here is made one at a time, as a NamedTuple of the same class
    v = 1 if p == 1 else v
    m = p * groups if v > 1 else data.draw(st.integers(1, 40))
    stage = data.draw(st.integers(0, p - 1))
    made = stage_schedule(stage, p, m, v)
    assert made == _megatron_order(stage, p, m, v)
    assert all(type(op) is Op for op in made)


def test_every_stage_runs_each_forward_then_its_backward_once():
    for p, m, v in [(1, 3, 1), (3, 5, 1), (4, 8, 2), (3, 6, 3), (2, 2, 4)]:
        for k in range(p):
            ops = stage_schedule(k, p, m, v)
            pairs = {(mb, c) for mb in range(m) for c in range(v)}
            assert sorted((o.microbatch, o.chunk) for o in ops if o.kind == "forward") == sorted(
                pairs
            )
            for o in ops:
                if o.kind == "backward":
                    assert ops.index(F(o.microbatch, o.chunk)) < ops.index(o)


def test_peak_in_flight_matches_the_inventory():
    # Activation memory (inventory.inflight_microbatches): 1F1B stage k holds p - k micro-batches;
    # interleaved (v-1)p + 2(p-k-1) + 1 chunks (Korthikanti et al. 2022 §4.2.3 for k = 0),
    # capped at m·v; m = p included (tests/test_inflight_chunks.py counts it by hand)
    for p, m, v in itertools.product([2, 4, 8], [2, 4, 8, 16, 32], [1, 2, 4]):
        if m < p and v > 1:
            continue  # interleaving needs m a multiple of p
        for k in range(p):
            chunks = peak_inflight(stage_schedule(k, p, m, v))
            assert chunks / v == pytest.approx(inflight_microbatches(k, p, v, m))


def test_interleaved_with_as_many_micro_batches_as_stages_warms_up_by_rank():
    # Megatron-Core (schedules.py @ 00611e6eeb0b, get_pp_rank_microbatches) has no all-warm-up
    # case at m = p (older Megatron-LM had one): p = 4, m = 4, v = 2 (8 visits a stage), stage
    # k warms up min(2(3 - k) + 1·4, 8) = 8, 8, 6, 4 forwards, then pairs, then backwards
    p, m, v = 4, 4, 2
    for k, warm in enumerate([8, 8, 6, 4]):
        ops = stage_schedule(k, p, m, v)
        pairs = 8 - warm
        want = ["forward"] * warm + ["forward", "backward"] * pairs + ["backward"] * warm
        assert [o.kind for o in ops] == want
        assert peak_inflight(ops) == min(warm + 1, 8)


# --- step time ---------------------------------------------------------------------------------


def test_1f1b_timeline_p2_m4_by_hand():
    # f = 1, b = 2, no transfer time.
    # stage 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] F2 [7,8] B2 [8,10] F3 [10,11] B3 [11,13]
    # stage 0: F0 [0,1] F1 [1,2] B0 [4,6] F2 [6,7] B1 [7,9] F3 [9,10] B2 [10,12] B3 [13,15]
    t = evaluate(2, 4, 1, 1.0, 2.0)
    assert t.starts[0] == (0, 1, 4, 6, 7, 9, 10, 13)
    assert t.starts[1] == (1, 2, 4, 5, 7, 8, 10, 11)
    assert t.step_s == 15.0 == (4 + 2 - 1) * (1 + 2)
    assert t.idle_s == (3.0, 3.0)  # (p - 1)·(f + b) each


def test_closed_form_equals_the_all_stage_evaluation():
    grid = itertools.product([1, 2, 3, 4, 6], [1, 2, 4, 6, 12], [1, 2, 3], [1.0, 0.7], [2.0, 1.3])
    for p, m, v, f, b in grid:
        if v > 1 and (p == 1 or m % p):
            continue
        assert evaluate(p, m, v, f, b).step_s == pytest.approx(step_time(p, m, v, f, b))


def test_representative_stage_plus_bubble_is_the_step():
    # the engine's reduction: one stage's own v·m·(f + b), then the schedule's bubble
    for p, m, v in [(4, 8, 1), (4, 8, 2), (8, 16, 4), (16, 64, 1)]:
        f, b = 0.03, 0.07
        reduced = v * m * (f + b) + bubble_s(p, f, b)
        assert evaluate(p, m, v, f, b).step_s == pytest.approx(reduced)


def test_1f1b_exposes_a_transfer_round_trip_per_step_by_hand():
    # p = 2, m = 3, f = 1, b = 2, each transfer c:
    # stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1+c,2+c] B0 [2+c,4+c]; stage 0: B0 [4+2c,6+2c]
    # F2 [6+2c,7+2c]; stage 1: F1 [4+c,5+c] B1 [5+c,7+c]; stage 0: B1 [7+2c,9+2c];
    # stage 1: F2 [7+3c,8+3c] B2 [8+3c,10+3c]; stage 0: B2 [10+4c,12+4c]
    c = 0.25
    t = evaluate(2, 3, 1, 1.0, 2.0, c)
    assert t.step_s == pytest.approx(12 + 4 * c)
    assert exposed_p2p_s(2, 3, 1, 1.0, 2.0, c) == pytest.approx(4 * c)


def test_interleaving_hides_transfers_in_steady_state():
    # with transfers small against a chunk's forward, only the 2(v·p - 1) transfers of filling
    # and draining the virtual pipeline show
    for p, m, v in [(2, 4, 2), (4, 8, 2), (4, 16, 3), (3, 6, 4)]:
        c = 0.01
        assert exposed_p2p_s(p, m, v, 1.0, 2.0, c) == pytest.approx(2 * (v * p - 1) * c)


def test_a_slower_stage_sets_the_pace():
    # stage 2 is 50 % slower: the step is at least its own work plus the forwards before its
    # first op and the backwards after its last, on the faster stages 0 and 1
    p, m = 4, 8
    fwd = [1.0, 1.0, 1.5, 1.0]
    bwd = [2.0, 2.0, 3.0, 2.0]
    t = evaluate(p, m, 1, fwd, bwd)
    assert t.busy_s[2] == m * (1.5 + 3.0)
    assert t.step_s >= m * 4.5 + 2 * (1.0 + 2.0)
    assert t.step_s > evaluate(p, m, 1, 1.0, 2.0).step_s


def test_more_micro_batches_shrink_the_bubble_share():
    shares = [evaluate(4, m, 1, 1.0, 2.0).idle_s[0] / evaluate(4, m, 1, 1.0, 2.0).step_s
              for m in (4, 8, 16, 32)]  # fmt: skip
    assert shares == sorted(shares, reverse=True)
    assert shares == pytest.approx([bubble_share(4, m) for m in (4, 8, 16, 32)])


def test_times_per_stage_and_chunk_by_hand():
    # p = 1, v = 2, m = 1: F chunk 0, F chunk 1, B chunk 1, B chunk 0, with c = 0.5 between
    # virtual stages. F0 0 -> 1; F1 waits F0 + c: 1.5 -> 3.5; B1 follows its own forward (no
    # transfer): 3.5 -> 7.5; B0 waits B1 + c: 8 -> 11.
    t = evaluate(1, 1, 2, [[1.0, 2.0]], [[3.0, 4.0]], 0.5)
    assert t.step_s == pytest.approx(11.0)
    assert t.busy_s == pytest.approx((10.0,))
    assert t.starts == ((0.0, 1.5, 3.5, 8.0),)


def test_times_per_chunk_must_cover_every_chunk():
    with pytest.raises(ValueError, match="one time per model chunk"):
        evaluate(2, 2, 2, [[1.0, 1.0], [1.0]], 1.0)


# --- the steady-state evaluation (cost independent of m) ---------------------------------------


def test_steady_evaluation_of_many_micro_batches_equals_the_closed_form():
    # uniform stages, no transfer time: (v·m + p - 1)·(f + b), computed here by hand:
    # p = 8, m = 1000, v = 1: (1000 + 7)·3 = 3021; v = 2: (2000 + 7)·3 = 6021
    assert evaluate_steady(8, 1000, 1, 1.0, 2.0).step_s == pytest.approx(3021.0, rel=1e-12)
    assert evaluate_steady(8, 1000, 2, 1.0, 2.0).step_s == pytest.approx(6021.0, rel=1e-12)


def test_steady_evaluation_of_a_1f1b_transfer_per_micro_batch_by_hand():
    # p = 2, f = 1, b = 2, transfer c = 0.25: test_1f1b_exposes_... works m = 3 out as
    # 12 + 4c. In steady state the cycle stage 0 F(j+1) -> c -> stage 1 F(j+1), B(j+1) ->
    # c -> stage 0 B(j+1) -> stage 0 F(j+2)... spans two micro-batches of one stage's work,
    # 2(f + b), plus two transfers: f + b + c per micro-batch, so m = 1003 takes
    # 12 + 4c + 1000·(3 + c) = 3263
    t = evaluate_steady(2, 1003, 1, 1.0, 2.0, 0.25)
    assert t.step_s == pytest.approx(12 + 4 * 0.25 + 1000 * (3 + 0.25), rel=1e-12)


stage_times = st.floats(0.05, 4.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(1, 6),
    v=st.integers(1, 3),
    periods=st.integers(1, 30),
    data=st.data(),
)
def test_steady_evaluation_equals_the_full_one(p, v, periods, data):
    v = 1 if p == 1 else v
    m = periods * (p if v > 1 else 1)
    fwd = [[data.draw(stage_times) for _ in range(v)] for _ in range(p)]
    bwd = [[data.draw(stage_times) for _ in range(v)] for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.01]) | st.floats(0.0, 2.0))
    full, steady = evaluate(p, m, v, fwd, bwd, c), evaluate_steady(p, m, v, fwd, bwd, c)
    assert steady.step_s == pytest.approx(full.step_s, rel=1e-9)
    assert steady.finish_s == pytest.approx(full.finish_s, rel=1e-9)
    assert steady.busy_s == pytest.approx(full.busy_s, rel=1e-12)


def test_the_direct_1f1b_program_is_the_schedule_order_with_its_dependencies():
    """`program_1f1b` against the program written out from `stage_schedule`: forward of
    micro-batch i on stage k waits for stage k - 1's (sent), backward for stage k + 1's
    (sent), the last stage's backward for its own forward."""
    from tiersim.workload.pipeline_timeline import program_1f1b

    for p, m in ((1, 3), (2, 1), (3, 5), (4, 9), (8, 17)):
        for k in range(p):
            want = []
            for mb, _chunk, kind in stage_schedule(k, p, m, 1):
                if kind == "forward":
                    own, dep, sent, d = k * m + mb, (k - 1) * m + mb, True, 1.5
                    if k == 0:
                        dep, sent = -1, False
                else:
                    own, dep, sent, d = (p + k) * m + mb, (p + k + 1) * m + mb, True, 2.5
                    if k == p - 1:
                        dep, sent = k * m + mb, False
                want.append((own, dep, sent, d))
            assert program_1f1b(k, p, m, 1.5, 2.5) == want


def test_the_direct_interleaved_program_is_the_schedule_order_with_its_dependencies():
    """`program_interleaved` against the program written out from `stage_schedule`: op
    (kind, stage, chunk, micro-batch) numbered ((kind·p + stage)·v + chunk)·m + mb; a forward
    waits for the previous virtual stage's (stage k - 1's same chunk, or stage p - 1's chunk
    before it), a backward for the next virtual stage's (stage k + 1's same chunk, or stage
    0's chunk after it), the last virtual stage's backward for its own forward."""
    from tiersim.workload.pipeline_timeline import program_interleaved

    for p, m, v in ((2, 2, 2), (2, 4, 3), (3, 3, 2), (3, 9, 2), (4, 8, 4), (5, 15, 3)):
        fwd = [[1.0 + k + 0.25 * c for c in range(v)] for k in range(p)]
        bwd = [[2.0 + k + 0.5 * c for c in range(v)] for k in range(p)]
        for k in range(p):
            want = []
            for mb, c, kind in stage_schedule(k, p, m, v):
                if kind == "forward":
                    own, d = (k * v + c) * m + mb, fwd[k][c]
                    dep, sent = ((k - 1) * v + c) * m + mb, True
                    if k == 0:
                        dep, sent = (((p - 1) * v + c - 1) * m + mb, True) if c else (-1, False)
                else:
                    own, d = ((p + k) * v + c) * m + mb, bwd[k][c]
                    dep, sent = ((p + k + 1) * v + c) * m + mb, True
                    if k == p - 1 and c < v - 1:
                        dep = (p * v + c + 1) * m + mb
                    elif k == p - 1:
                        dep, sent = (k * v + c) * m + mb, False
                want.append((own, dep, sent, d))
            assert program_interleaved(k, p, m, v, fwd[k], bwd[k]) == want, (p, m, v, k)


@settings(max_examples=200)
@given(
    p=st.integers(1, 9),
    extra=st.integers(0, 20),
    keep_starts=st.booleans(),
    data=st.data(),
)
def test_the_tick_ordered_1f1b_timeline_is_the_dependency_graph_walk(p, extra, keep_starts, data):
    """The 1F1B timeline taken tick by tick (no dependency graph) against the graph walk of
    every stage's program: the same starts and ends, to the bit, for every m >= p - 1."""
    from tiersim.workload.pipeline_timeline import timeline_1f1b, timeline_graph

    m = max(1, p - 1 + extra)
    fwd = [data.draw(stage_times) for _ in range(p)]
    bwd = [data.draw(stage_times) for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.01]) | st.floats(0.0, 2.0))
    fast = timeline_1f1b(p, m, fwd, bwd, c, keep_starts)
    graph = timeline_graph(p, m, 1, [[f] for f in fwd], [[b] for b in bwd], c, keep_starts)
    assert fast == graph


@settings(max_examples=150, deadline=None)
@given(p=st.integers(1, 9), extra=st.integers(0, 24), few=st.booleans(), data=st.data())
def test_the_ticks_let_go_as_walked_give_the_kept_ends_last_and_repetition(p, extra, few, data):
    """`steady_ticks` (each tick's ends kept p + 3 ticks, the repetition found as the blocks
    come) against the graph walk's ends kept and `_repetition` run over them: the same
    last ends and the same shift (or none), to the bit. Times drawn from a few values
    repeat (a shift found), drawn freely often do not (none)."""
    from tiersim.workload import pipeline_steady
    from tiersim.workload.pipeline_timeline import steady_ticks, timeline_graph

    m = max(1, p - 1 + extra)
    drawn = st.sampled_from([0.5, 1.0, 1.5]) if few else stage_times
    fwd = [data.draw(drawn) for _ in range(p)]
    bwd = [data.draw(drawn) for _ in range(p)]
    c = data.draw(st.sampled_from([0.0, 0.25]) | st.floats(0.0, 2.0))
    _, ends = timeline_graph(p, m, 1, [[x] for x in fwd], [[x] for x in bwd], c, False)
    kept = [e[-1] for e in ends], pipeline_steady._repetition(p, m, 1, ends)
    assert steady_ticks(p, m, fwd, bwd, c, pipeline_steady.REL) == kept


def test_the_1t_pipeline_repeats_the_same_when_let_go():
    """Korthikanti et al.'s 1T stage times (64 stages, its first stage's embedding and last
    stage's head heavier) over `evaluate_steady`'s shortest schedule: a shift found, the
    same as the graph walk's ends give, and the same last ends."""
    from tiersim.workload import pipeline_steady
    from tiersim.workload.pipeline_timeline import steady_ticks, timeline_graph

    p, m = 64, pipeline_steady._shortest(64, 512, 1, 1)
    fwd = [0.04323083660008902] + [0.04250256962373283] * 62 + [0.04629661377493306]
    bwd = [0.07979109068161466] + [0.07884828080749336] * 62 + [0.08566837123518359]
    _, ends = timeline_graph(p, m, 1, [[x] for x in fwd], [[x] for x in bwd], 0.0, False)
    shift = pipeline_steady._repetition(p, m, 1, ends)
    assert shift is not None
    assert steady_ticks(p, m, fwd, bwd, 0.0, pipeline_steady.REL) == ([e[-1] for e in ends], shift)
