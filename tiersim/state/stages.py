"""Pipeline stages: which layers each stage holds (an even share, or `parallel.stage_layers`),
and the parameter tensors one GPU of a stage holds after tensor, expert and expert-tensor
division (the embeddings on the first stage, the head and any MTP modules on the last)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from tiersim.core.frozen import replaced
from tiersim.state.model import Matrix, Model, ModelUnit, UnitKind

Units = Sequence[ModelUnit]  # a model's units: Model.units(), as Resolved.units holds them


def _split(m: Matrix, tensor: int) -> Matrix:
    """One GPU's share of a tensor-parallel matrix: the split dimension divided by t, rounded
    up as padding does, the matrix kept 2-D (Adafactor's row and column statistics need it).
    Column-parallel tensors split their output columns; row- and vocab-parallel ones, rows."""
    if not m.tensor_split or tensor == 1:
        return m
    if m.cols > 1 and not m.split_rows:
        return replaced(m, cols=math.ceil(m.cols / tensor))
    return replaced(m, rows=math.ceil(m.rows / tensor))


def stage_layers(
    units: Units, stage: int, pipeline: int, split: Sequence[int] | None = None
) -> list[ModelUnit]:
    """The layers of `stage`, an even share of the model's in order: its runs of alike
    layers, cut at the stage's ends. With `split` (`parallel.stage_layers`: layers per
    pipeline chunk in model order, pipeline x virtual entries), the stage's chunks k, k + p,
    k + 2p, ... in turn (Megatron's interleaved placement), each as the list says."""
    runs = [u for u in units if u.kind is UnitKind.LAYER]
    if split is None:
        per = sum(u.count for u in runs) // pipeline
        ranges = [(stage * per, (stage + 1) * per)]
    else:
        starts = [sum(split[:j]) for j in range(len(split) + 1)]
        ranges = [(starts[j], starts[j + 1]) for j in range(stage, len(split), pipeline)]
    out = []
    for lo, hi in ranges:
        for u in runs:
            a, b = max(lo, u.first), min(hi, u.first + u.count)
            if a < b:
                out.append(replaced(u, name=f"L{a}", first=a, count=b - a))
    return out


def _rest(model: Model, units: Units, stage: int, pipeline: int) -> list[Matrix]:
    """What a stage holds beside its layers: the embeddings on the first, the head on the
    last (and there a copy of tied embeddings, which the last stage keeps for itself)."""
    embedding = next(u for u in units if u.kind is UnitKind.EMBEDDING).matrices
    rest = list(embedding) if stage == 0 else []
    if stage == pipeline - 1:
        rest += next(u for u in units if u.kind is UnitKind.HEAD).matrices
        if model.tied_embeddings and pipeline > 1:
            rest.append(embedding[0])
    return rest


def untied_head_values(units: Units, stage: int, pipeline: int, tensor: int) -> int:
    """The untied output projection's values on one GPU of the last stage (the head's
    vocabulary matrix, vocab-parallel over t); 0 on other stages, and where the head is tied
    to the embeddings (the head unit then holds no such matrix)."""
    if stage != pipeline - 1:
        return 0
    head = next((u.matrices for u in units if u.kind is UnitKind.HEAD), ())
    return sum(_split(m, tensor).size for m in head if m.embedding and not m.expert)


def _expert_split(m: Matrix, expert: int) -> Matrix:
    """One GPU's share of the routed experts' tensors: 1/e of them (e divides the experts)."""
    return replaced(m, count=m.count // expert) if m.expert else m


def _layer_split(m: Matrix, tensor: int, expert: int, expert_tensor: int | None) -> Matrix:
    """A layer's tensor on one GPU: routed experts split over `expert_tensor` ranks
    (Megatron-Core's ETP; None: the tensor-parallel size) and 1/e of them kept."""
    split = expert_tensor if m.expert and expert_tensor is not None else tensor
    return _expert_split(_split(m, split), expert)


def unit_matrices(
    model: Model,
    units: Units,
    stage: int,
    pipeline: int,
    tensor: int,
    expert: int = 1,
    expert_tensor: int | None = None,
    split: Sequence[int] | None = None,
) -> list[list[Matrix]]:
    """Parameter tensors one GPU of `stage` holds, unit by unit: each of its layers, then
    the rest."""
    layers: list[list[Matrix]] = []
    for u in stage_layers(units, stage, pipeline, split):  # a run of `count` alike layers
        # split once a run (frozen values, shared by its layers' lists): a model of a hundred
        # layers split each one's tensors a hundred times over
        mats = [_layer_split(m, tensor, expert, expert_tensor) for m in u.matrices]
        layers += [list(mats) for _ in range(u.count)]
    rest = _rest(model, units, stage, pipeline)  # MTP modules' experts split as a layer's
    return [*layers, [_layer_split(m, tensor, expert, expert_tensor) for m in rest]]


def stage_matrices(
    model: Model,
    units: Units,
    stage: int,
    pipeline: int,
    tensor: int,
    expert: int = 1,
    expert_tensor: int | None = None,
    split: Sequence[int] | None = None,
    memo: dict | None = None,
) -> list[Matrix]:
    """Every parameter tensor one GPU of `stage` holds, alike layers counted together (as
    many values whatever the depth). `memo`: a dict its caller keeps while it asks for
    several stages of the same `units` (the inventory's candidates): stages whose runs of
    layers are the same runs of the same tensors split and stack them once."""
    runs = stage_layers(units, stage, pipeline, split)
    key = (tuple((id(u.matrices), u.count) for u in runs), tensor, expert, expert_tensor)
    stacked = None if memo is None else memo.get(key)
    if stacked is None:
        stacked = _stacked(runs, tensor, expert, expert_tensor)
        if memo is not None:
            memo[key] = stacked
    return [
        *stacked,
        *(
            _layer_split(m, tensor, expert, expert_tensor)
            for m in _rest(model, units, stage, pipeline)
        ),
    ]


def _stacked(runs: Units, tensor: int, expert: int, expert_tensor: int | None) -> list[Matrix]:
    """The runs' layer tensors on one GPU, alike layers' counted together (none of count 0)."""
    alike: Counter = Counter()
    for u in runs:
        alike[u.matrices] += u.count
    stacked = [
        replaced(m2, count=m2.count * n)
        for mats, n in alike.items()
        for m2 in (_layer_split(m, tensor, expert, expert_tensor) for m in mats)
    ]
    return [m for m in stacked if m.count]


def chunk_layers(units: Units, stage: int, pipeline: int, split: Sequence[int]) -> list[list]:
    """The stage's layers chunk by chunk (virtual chunk i: list entry stage + i·pipeline)."""
    chunks = []
    for j in range(stage, len(split), pipeline):
        ahead = sum(split[:j])  # chunk j alone: the model's layers cut at its two ends
        cut = [ahead, split[j], sum(split[j + 1 :])]
        chunks.append([u for u in stage_layers(units, 1, 3, cut) if split[j]])
    return chunks


def interleaved_peak(
    stage: int,
    pipeline: int,
    virtual: int,
    micro_batches: int,
    weights: Sequence[float],
    paired: bool = False,
) -> float:
    """The most of `weights[chunk]` a stage holds at once under Megatron-LM's interleaved 1F1B
    (workload/pipeline.py's order: warm-up forwards, one forward then one backward, cool-down
    backwards; the k-th forward on chunk (k % pv) // p, backwards in reverse chunk order):
    forwards add their chunk's weight, backwards release it. `paired`: combined 1F1B's
    warm-up, one forward longer (workload/pipeline.py `warmup_forwards`)."""
    p, v, total = pipeline, virtual, micro_batches * virtual
    extra = 1 if paired else 0
    warmup = min((p - stage - 1) * 2 + (v - 1) * p + extra, total)

    def chunk(k: int) -> int:
        return (k % (p * v)) // p

    live = peak = 0.0
    order = [(k, 1) for k in range(warmup)]
    for i in range(total - warmup):
        order += [(warmup + i, 1), (i, -1)]
    order += [(k, -1) for k in range(total - warmup, total)]
    for k, sign in order:
        live += weights[chunk(k)] if sign > 0 else -weights[v - 1 - chunk(k)]
        peak = max(peak, live)
    return peak


def inflight_microbatches(
    stage: int, pipeline: int, virtual: int, micro_batches: int, paired: bool = False
) -> float:
    """Micro-batches of activations a stage holds at its peak, in units of its layers.

    1F1B: stage k holds p - k. Interleaved (Megatron): (v-1)p + 2(p-k-1) + 1 model chunks of
    L/(pv) layers; for k = 0 that is p·(1 + (p-1)/(pv)), Korthikanti et al. eq. in §4.2.3.
    Capped at the m·v chunks, m = p included: Megatron-Core's warm-up has no all-warm-up case
    there (schedules.py @ 00611e6eeb0b, `get_pp_rank_microbatches`), nor has the engine's
    order (workload/pipeline.py `warmup_forwards`; tests/test_inflight_chunks.py).
    `paired`: combined 1F1B (`parallel.overlap_expert_comm`) runs one warm-up forward more
    on every stage of a pipeline, so one chunk more is held (workload/pipeline.py
    `warmup_forwards`).
    """
    extra = 1 if paired and pipeline > 1 else 0
    if virtual == 1:
        return float(min(pipeline - stage + extra, micro_batches))
    chunks = (virtual - 1) * pipeline + 2 * (pipeline - stage - 1) + 1 + extra
    return min(chunks, micro_batches * virtual) / virtual


def paired(par, model) -> bool:
    """Combined 1F1B (workload/experts.py `combined_1f1b`): one warm-up forward more."""
    return par.overlap_expert_comm and par.expert > 1 and model.is_moe_model
