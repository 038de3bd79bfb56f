"""A point's fixed cost, the work done once (docs/speed.md, "Fourteenth round"): each cut
held to the path it replaces, or to arithmetic written out here, so that a cut that moved a
figure fails."""

from __future__ import annotations

import functools

import pytest
from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.state.buffers import largest_tensor_elements, offload_gradient_buffer_bytes
from tiersim.state.inventory import build_inventory, stage_bytes
from tiersim.state.resolved import resolve
from tiersim.state.stages import stage_matrices
from tiersim.workload.pinned import host_gradient_buffer_bytes, pinned_size

SHIPPED = sorted(SCENARIOS.glob("*.yaml")) + sorted(
    p for p in (SCENARIOS / "published").glob("*.yaml") if p.name != "references.yaml"
)


@functools.cache
def _resolved(path):
    r = resolve(load_scenario(path, []).scenario)
    return r, build_inventory(r)


def test_the_zero_offload_host_gradient_buffer_by_hand():
    # DeepSpeed ZeRO-2 with the optimizer on the CPU holds a pinned fp16 buffer of the rank's
    # largest tensor: GPT-2's embedding, 50,257 rows (50,304 where padded) x 4,096 = 205.9
    # (206.0) M values against the MLP's 4,096 x 16,384 = 67.1 M; x 2 B = 411.7 (412.1) MB,
    # held as the next power of two, 2^29 B, either way
    r, inv = _resolved(SCENARIOS / "zero-offload-10b-dgx2.yaml")
    assert host_gradient_buffer_bytes(r, r.execution.offload, inv) == 2**29


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_the_host_gradient_buffer_as_worked_out_from_the_stages_tensors(path):
    # the stage's tensors are split only where a buffer is held: every shipped scenario
    # gives what splitting them always gave
    r, inv = _resolved(path)
    par = r.execution.parallel
    mats = stage_matrices(
        r.model, r.units, inv.stage, par.pipeline, par.tensor, split=par.stage_layers
    )
    nbytes = offload_gradient_buffer_bytes(r.execution, largest_tensor_elements(r.model, mats))
    want = pinned_size(nbytes) if r.execution.offload.pin_memory else nbytes
    assert host_gradient_buffer_bytes(r, r.execution.offload, inv) == want


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_stages_asked_with_one_memo_are_each_stage_asked_alone(path):
    # the inventory asks for its candidate stages with one memo (each run of layers split
    # and its activations worked out once): every stage of every shipped scenario, asked in
    # turn with one memo, gives what it gives asked alone (DeepSeek-V3's first dense layers
    # and uneven splits make stages whose runs differ)
    r, _ = _resolved(path)
    memo: dict = {}
    for k in range(r.execution.parallel.pipeline):
        shared, alone = stage_bytes(r, r.model, k, memo), stage_bytes(r, r.model, k)
        assert repr(shared) == repr(alone), k


@pytest.mark.parametrize("p2p", [0.0, -0.0])
def test_the_ticks_without_point_to_point_time_add_nothing_even_to_zeros(p2p):
    # with no point-to-point time the ticks read each neighbour's end as it is (an end is
    # never -0.0: ends start at 0.0 and 0.0 + -0.0 is 0.0), where the graph walk adds the
    # 0.0: stages of zero time (some -0.0) beside others, the same ends and shift, bit for bit
    from tiersim.workload import pipeline_steady
    from tiersim.workload.pipeline_timeline import steady_ticks, timeline_graph

    p, m = 5, 12
    fwd = [0.0, -0.0, 1.0, -0.0, 0.5]
    bwd = [-0.0, 2.0, 0.0, 1.0, -0.0]
    _, ends = timeline_graph(p, m, 1, [[x] for x in fwd], [[x] for x in bwd], p2p, False)
    kept = [e[-1] for e in ends], pipeline_steady._repetition(p, m, 1, ends)
    got = steady_ticks(p, m, fwd, bwd, p2p, pipeline_steady.REL)
    assert repr(got) == repr(kept)


@pytest.mark.parametrize(
    "t, c, d, p, e, et, s",
    [(1, 1, 1, 1, 1, 1, 1), (8, 1, 1, 64, 1, 8, 1), (2, 2, 8, 4, 4, 1, 4), (4, 1, 8, 2, 2, 4, 8)],
)
def test_a_meshs_groups_worked_out_once_are_the_docstrings(t, c, d, p, e, et, s):
    # each group (size, stride) as tiersim.config.mesh's docstring writes them out, the
    # stride 1 where a group is one rank; asked twice, and of a mesh made from another by
    # `dataclasses.replace` (its own degrees, not the first's groups)
    import dataclasses

    from tiersim.config.mesh import Mesh

    def want(t, c, d, p, e, et, s):
        groups = {
            "tensor": (t, 1),
            "context": (c, t),
            "data": (d * c, t),
            "shard": (s * c, t),
            "replicate": (d // s, t * c * s),
            "pipeline": (p, t * c * d),
            "expert": (e, et),
            "expert_tensor": (et, 1),
            "expert_data": (t * c * d // (et * e), et * e),
            "embedding": (2, t * c * d * (p - 1)) if p > 1 else (1, 1),
        }
        return {k: (n, stride if n > 1 else 1) for k, (n, stride) in groups.items()}

    mesh = Mesh(tensor=t, context=c, data=d, pipeline=p, expert=e, expert_tensor=et, shard=s)
    for _ in range(2):
        got = {k: (mesh.group(k).size, mesh.group(k).stride) for k in want(1, 1, 1, 1, 1, 1, 1)}
        assert got == want(t, c, d, p, e, et, s)
    other = dataclasses.replace(mesh, pipeline=2 * p)
    g = other.group("embedding")
    assert (g.size, g.stride) == want(t, c, d, 2 * p, e, et, s)["embedding"]
    with pytest.raises(ValueError, match="no parallel group 'nope'"):
        mesh.group("nope")


def test_an_owner_memo_works_a_value_out_once_an_owner_and_again_for_the_next():
    from tiersim.core.memo import OwnerMemo

    memo, made = OwnerMemo(), []

    def make(value):
        made.append(value)
        return value

    a, b, held = object(), object(), object()
    assert memo.get(a, "k", None, lambda: make(1)) == 1
    assert memo.get(a, "k", None, lambda: make(2)) == 1  # a's, once
    assert memo.get(a, ("id", id(held)), held, lambda: make(3)) == 3
    assert memo.get(a, ("id", id(held)), object(), lambda: make(4)) == 4  # another object
    assert memo.get(b, "k", None, lambda: make(5)) == 5  # the next owner: worked out again
    assert memo.get(a, "k", None, lambda: make(6)) == 6  # a again: nothing of b's, nor a's kept
    assert made == [1, 3, 4, 5, 6]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_points_answers_asked_again_are_worked_out_alike(path, monkeypatch):
    # a workload's build asks for a unit's kernels, the rest unit's collectives and each
    # group's link (every collective's, the network's capacities) more than once, each
    # answered once a point: every answer it was given is what a fresh owner (a copy of the
    # point's Resolved, nothing kept for it) works out for the same question
    import dataclasses
    import sys

    from tiersim.workload import comms, kernels
    from tiersim.workload.work import build_workload

    r, inv = _resolved(path)
    asked = []
    for module, name in (
        (kernels, "unit_kernels"),
        (comms, "rest_tensor_comms"),
        (comms, "capacities"),
        (comms, "comm"),
    ):
        real = getattr(module, name)

        def spy(*args, _real=real, **kw):
            out = _real(*args, **kw)
            asked.append((_real, args, kw, out))
            return out

        for m in list(sys.modules.values()):
            ours = (getattr(m, "__name__", "") or "").startswith("tiersim")
            if ours and getattr(m, name, None) is real:
                monkeypatch.setattr(m, name, spy)
    build_workload(r, inv)
    assert asked
    for real, (owner, *rest), kw, out in asked:
        assert repr(real(dataclasses.replace(owner), *rest, **kw)) == repr(out)


def _sections(model):
    """`model` and every section nested in it (pydantic models, in lists and dicts too)."""
    from pydantic import BaseModel

    yield model
    for value in model.__dict__.values():
        for item in (
            value.values()
            if isinstance(value, dict)
            else (value if isinstance(value, list | tuple) else (value,))
        ):
            if isinstance(item, BaseModel):
                yield from _sections(item)


READ_PLAIN = ("Precision", "Shard", "Placement", "ExpertPlacement", "DeepSpeed", "Offload")


def test_a_sections_plain_fields_are_its_dumps_in_every_shipped_scenario():
    # precision, shard and placement were dumped by pydantic's serializer 52 times a point
    # (docs/speed.md, "Eighteenth round"): every plain field (no section of its own) of every
    # section of every shipped scenario, read as `plain_fields` reads it, is the dump's value
    # and of its type; a nested section is left as it is (none of its readers reads one)
    from pydantic import BaseModel

    from tiersim.config.fields import plain_fields

    seen = 0
    for path in SHIPPED:
        for section in _sections(load_scenario(path, []).scenario):
            dumped, plain = section.model_dump(), plain_fields(section)
            if type(section).__name__ in READ_PLAIN:  # (elsewhere a field may be left out)
                assert plain.keys() == dumped.keys(), (path.stem, type(section).__name__)
            for key in dumped:
                value = plain[key]
                if isinstance(value, BaseModel):
                    assert dumped[key] == value.model_dump()
                    continue
                if not isinstance(value, str | int | float | None):  # a list or dict of them
                    assert type(section).__name__ not in READ_PLAIN, (path.stem, key)
                    continue
                assert type(value) is type(dumped[key]) and value == dumped[key], (path, key)
                seen += 1
    assert seen > 1000


def _ends_spelled_out(ticks, block):
    """The repetition's ends as the twelfth round wrote them: stage k's forward, then its
    backward, for each k, each read from its tick's copy by index."""
    size, p = len(ticks), len(ticks[0])
    return [ticks[(2 * block + k + kind) % size][k] for k in range(p) for kind in (0, 1)]


def test_the_ticks_repetition_read_in_c_passes_is_the_one_spelled_out():
    # `_repeats` gathers block I - 1's and block I's ends from the kept ticks by slices and
    # a map over the diagonal: on random kept ticks (ring positions, sizes p + 3, shifts
    # equal, within and beyond the tolerance, and a stage that differs) the shift and the
    # verdict are those of the list spelled out, stage by stage
    import random

    from tiersim.workload import pipeline_timeline

    rnd = random.Random(18)
    for _ in range(400):
        p = rnd.randint(2, 9)
        size, block = p + 3, rnd.randint(p + 1, 60)
        ticks = [[rnd.uniform(1.0, 50.0) for _ in range(p)] for _ in range(size)]
        shift = rnd.choice([0.0, 0.5, rnd.uniform(0, 3)])
        a = _ends_spelled_out(ticks, block - 1)
        for k in range(p):  # make block = block - 1 + shift, then maybe disturb one end
            for kind in (0, 1):
                ticks[(2 * block + k + kind) % size][k] = a[2 * k + kind] + shift
        if rnd.random() < 0.5:
            k, kind = rnd.randrange(p), rnd.randrange(2)
            ticks[(2 * block + k + kind) % size][k] += rnd.choice([1e-13, 1e-9, 1.0])
        a, b = _ends_spelled_out(ticks, block - 1), _ends_spelled_out(ticks, block)
        shifts = [y - x for x, y in zip(a, b, strict=True)]
        rel = rnd.choice([1e-12, 1e-10])
        want = shifts[-1] if max(shifts) - min(shifts) <= rel * max(abs(y) for y in b) else None
        assert repr(pipeline_timeline._repeats(ticks, block, rel)) == repr(want)


def _per_chunk_row_by_row(value, pipeline, virtual, name):
    """`pipeline.per_chunk` as it read each row before the eighteenth round (copied here)."""
    if isinstance(value, int | float):
        value = [float(value)] * pipeline
    rows = list(value)
    if len(rows) != pipeline:
        raise ValueError(f"{name} has {len(rows)} entries, expected one per stage ({pipeline})")
    table = [[float(r)] * virtual if isinstance(r, int | float) else list(r) for r in rows]
    if any(len(r) != virtual for r in table):
        raise ValueError(f"{name}: each stage needs one time per model chunk ({virtual})")
    if any(x < 0 for r in table for x in r):
        raise ValueError(f"{name}(={table}) must be >= 0")
    return table


def _outcome(fn, *args):
    try:
        return "ok", repr(fn(*args))
    except ValueError as e:
        return "error", str(e)


def test_the_timelines_tables_read_in_c_passes_are_those_read_row_by_row():
    # per_chunk's rows of lists or tuples copied and checked in C passes, busy's sums mapped:
    # on random tables (numbers, lists, tuples, a mix; a row too short or too long; a
    # negative time, -0.0, 0.0; too few rows) the same table or the same error, and the
    # same busy time per stage as m·(Σf + Σb) summed row by row
    import random

    from tiersim.workload.pipeline import busy, per_chunk

    rnd = random.Random(36)
    for _ in range(600):
        p, v = rnd.randint(1, 6), rnd.randint(1, 3)

        def time():
            return rnd.choice([0.0, -0.0, 1.5, rnd.uniform(0, 2), -rnd.uniform(0, 1)] + [1] * 3)

        def row(v=v):
            n = v if rnd.random() < 0.9 else rnd.choice([v - 1, v + 1])
            kind = rnd.choice([list, tuple, "number"])
            return time() if kind == "number" else kind(time() for _ in range(n))

        value = rnd.choice([time(), [row() for _ in range(p if rnd.random() < 0.9 else p + 1)]])
        got = _outcome(per_chunk, value, p, v, "t")
        assert got == _outcome(_per_chunk_row_by_row, value, p, v, "t"), value
        if got[0] == "ok":
            table, m = per_chunk(value, p, v, "t"), rnd.randint(1, 600)
            want = tuple(m * (sum(f) + sum(b)) for f, b in zip(table, table[::-1], strict=True))
            assert repr(busy(m, table, table[::-1])) == repr(want)


def test_the_shortest_schedule_by_division_is_the_loops():
    # `_shortest` adds the periods it needs at once: the loop it replaces, a period at a time
    # from m mod the period, for 1F1B and interleaved shapes and m from 1 to 300
    from tiersim.workload import pipeline_steady

    for p in range(1, 13):
        for v in (1, 2, 3):
            per = 1 if v == 1 else p
            for m in range(1, 301):
                n = m % per or per
                while n < (p + 2 if v == 1 else 3 * p) + 2 * per:
                    n += per
                assert pipeline_steady._shortest(p, m, v, per) == n, (p, v, m)


def test_the_mesh_of_the_section_asked_last_is_the_one_worked_out():
    # `Mesh.of` answers the section it was asked last by identity: sections asked in turn
    # (the same one again, another, one equal to it but not it, one changed by a copy) each
    # get the mesh worked out from their own degrees
    from tiersim.config.mesh import Mesh
    from tiersim.config.parallel_schema import Parallel

    a = Parallel(data=8, tensor=4, pipeline=2)
    b = Parallel(data=2, tensor=8, pipeline=4, sequence=True)
    for par in (
        a,
        a,
        b,
        a,
        Parallel(data=8, tensor=4, pipeline=2),
        b.model_copy(update={"data": 4}),
        b,
    ):
        mesh = Mesh.of(par)
        assert (mesh.data, mesh.tensor, mesh.pipeline) == (par.data, par.tensor, par.pipeline)
        assert Mesh.of(par) is mesh
