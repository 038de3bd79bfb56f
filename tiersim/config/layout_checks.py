"""Which parallel layouts can be built (exit 2, naming the key, what is wrong and what would
divide), and the layer split a framework takes where `parallel.stage_layers` is absent. The
layout itself is the Mesh's (tiersim/config/mesh.py)."""

from __future__ import annotations

from tiersim.config.fields import plain_fields
from tiersim.config.schema import Parallel, Scenario
from tiersim.core.errors import Problem


def _divisors_near(n: int, limit: int = 6) -> str:
    divs = [k for k in range(1, n + 1) if n % k == 0]
    return ", ".join(map(str, divs[:limit])) + (", ..." if len(divs) > limit else "")


def mesh_problems(s: Scenario) -> list[Problem]:
    """Every way the layout cannot be built (exit 2): each names its key, what is wrong and
    what would divide."""
    return (
        _tensor_problems(s)
        + _pipeline_problems(s)
        + _context_problems(s)
        + _hsdp_problems(s)
        + _expert_problems(s)
        + _imbalance_problems(s)
    )


def _pipeline_problems(s: Scenario) -> list[Problem]:
    p, m = s.parallel, s.model
    problems = []
    chunks = p.pipeline * p.virtual_pipeline
    if p.stage_layers is not None:
        problems += _stage_layers_problems(p, m.layers)
    elif m.layers % chunks and default_stage_layers(s) is None:
        problems.append(
            Problem(
                "parallel.pipeline",
                f"layers ({m.layers}) are not divisible by "
                f"pipeline x virtual_pipeline ({p.pipeline} x {p.virtual_pipeline})"
                f" ({_chunks_expected(m.layers, chunks)})",
                "E-LAYOUT",
            )
        )
    if p.virtual_pipeline > 1 and p.pipeline == 1:
        problems.append(
            Problem(
                "parallel.virtual_pipeline",
                "interleaving needs pipeline > 1 (expected parallel.pipeline of 2 or more "
                "beside it, or virtual_pipeline: 1)",
                "E-LAYOUT",
            )
        )
    problems += _deepspeed_pipeline_problems(s)
    m_b = s.training.grad_accumulation
    if p.virtual_pipeline > 1 and m_b % p.pipeline:
        problems.append(
            Problem(
                "training.grad_accumulation",
                f"interleaving needs the micro-batches ({m_b}) to be a multiple of the pipeline "
                f"size ({p.pipeline}) (Narayanan et al. 2021, §2.2.2)",
                "E-LAYOUT",
            )
        )
    return problems


def _chunks_expected(layers: int, chunks: int) -> str:
    """What a layer split that does not divide expects: a divisor, or stage_layers with an
    example; past one layer a chunk, the example would be mostly empty stages (64 entries
    for 32 layers), so the count of empty ones is said instead."""
    if chunks > layers:
        return (
            f"expected a divisor of {layers} (at most {layers} chunks of layers), or "
            f"parallel.stage_layers: {chunks} entries summing to {layers}, at least "
            f"{chunks - layers} of them 0"
        )
    example = list(even_split(layers, chunks))
    return f"expected a divisor, or parallel.stage_layers: {chunks} entries, e.g. {example}"


def _deepspeed_pipeline_problems(s: Scenario) -> list[Problem]:
    """DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3: PipelineEngine.__init__ asserts
    `zero_optimization_stage() < ZeroStageEnum.gradients`, "ZeRO-2 and ZeRO-3 are incompatible
    with pipeline parallelism" (deepspeed/runtime/pipe/engine.py); such a run never starts."""
    p = s.parallel
    if s.training.framework != "deepspeed" or p.pipeline == 1 or p.zero_stage < 2:
        return []
    why = (
        f"is {p.zero_stage} with parallel.pipeline {p.pipeline}, but DeepSpeed's pipeline "
        'engine refuses ZeRO-2 and ZeRO-3 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline '
        'parallelism", deepspeed/runtime/pipe/engine.py); expected zero_stage 0 or 1, '
        "pipeline: 1, or another training.framework"
    )
    return [Problem("parallel.zero_stage", why, "E-CONFLICT")]


def _tensor_problems(s: Scenario) -> list[Problem]:
    p, m = s.parallel, s.model
    problems = []
    kv = m.kv_heads or m.heads
    if m.heads is not None and m.heads % p.tensor:
        problems.append(
            Problem(
                "parallel.tensor",
                f"heads ({m.heads}) are not divisible by the tensor-parallel size ({p.tensor})"
                f" ({_tensor_expected(m.heads, kv)})",
                "E-LAYOUT",
            )
        )
    if kv is not None and kv % p.tensor and p.tensor % kv:
        problems.append(
            Problem(
                "parallel.tensor",
                f"kv_heads ({kv}) and the tensor-parallel "
                f"size ({p.tensor}) must divide one another ({_tensor_expected(m.heads, kv)})",
                "E-LAYOUT",
            )
        )
    return problems


def _tensor_expected(heads: int | None, kv: int) -> str:
    """The tensor-parallel sizes both rules allow (each divides the heads, and divides the
    kv_heads or is a multiple of them): what the user can choose from, not the rule alone."""
    if heads is None:
        return f"expected a divisor or a multiple of {kv}"
    sizes = [t for t in range(1, heads + 1) if heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    return (
        f"expected a size dividing the heads ({heads}) that divides the kv_heads ({kv}) or "
        f"is a multiple of them: {', '.join(map(str, sizes))}"
    )


def even_split(layers: int, chunks: int) -> tuple[int, ...]:
    """`layers` over `chunks` as evenly as possible, the larger chunks last (torchtitan's
    default split: the first stage also runs the embedding, the last the output head and the
    loss, and this leaves the first the lighter)."""
    base, extra = divmod(layers, chunks)
    return tuple(base + (1 if j >= chunks - extra else 0) for j in range(chunks))


def default_stage_layers(s: Scenario) -> tuple[int, ...] | None:
    """The framework's split where `parallel.stage_layers` is absent and the layers do not
    divide the chunks: torchtitan (training.framework: fsdp) splits as evenly as possible;
    Megatron-LM (and tiersim without a framework) requires divisibility: None."""
    p, layers = s.parallel, s.model.layers
    chunks = p.pipeline * p.virtual_pipeline
    if p.stage_layers is not None or layers is None or layers % chunks == 0:
        return None
    if s.training.framework != "fsdp" or layers < chunks:
        return None
    return even_split(layers, chunks)


def layout_notes(s: Scenario) -> list[Problem]:
    """The default split a framework took, said (nothing where the layers divide)."""
    split = default_stage_layers(s)
    if split is None:
        return []
    p = s.parallel
    why = (
        f"not given, and {s.model.layers} layers do not divide pipeline x virtual_pipeline "
        f"({p.pipeline} x {p.virtual_pipeline}): split as torchtitan does (training.framework: "
        f"fsdp), as evenly as possible, the larger chunks last: {list(split)}"
    )
    return [Problem("parallel.stage_layers", why, "E-LAYOUT")]


def _stage_layers_problems(p: Parallel, layers: int | None) -> list[Problem]:
    split, chunks = p.stage_layers, p.pipeline * p.virtual_pipeline
    problems = []
    if len(split) != chunks:
        problems.append(
            Problem(
                "parallel.stage_layers",
                f"has {len(split)} entries (expected pipeline x virtual_pipeline = "
                f"{p.pipeline} x {p.virtual_pipeline} = {chunks}, the layers of each chunk "
                "in model order)",
                "E-LAYOUT",
            )
        )
        return problems
    if layers is not None and sum(split) != layers:
        problems.append(
            Problem(
                "parallel.stage_layers",
                f"sums to {sum(split)} layers, but the model has {layers} (expected entries "
                f"that sum to {layers}, e.g. {list(even_split(layers, chunks))})",
                "E-LAYOUT",
            )
        )
    empty = [k for k in range(p.pipeline) if not sum(split[k :: p.pipeline])]
    if empty:
        problems.append(
            Problem(
                "parallel.stage_layers",
                f"leaves pipeline stage {empty[0]} without a layer (expected at least one "
                "layer in every stage's chunks)",
                "E-LAYOUT",
            )
        )
    return problems


def _context_problems(s: Scenario) -> list[Problem]:
    """Context parallelism splits each sequence into 2·c chunks (the causal load-balanced
    split) and, with all_to_all, the heads over the tensor x context ranks."""
    p, c = s.parallel, s.parallel.context
    problems = []
    if c == 1:
        return problems
    seq = s.seq_len
    if seq % (2 * c):
        problems.append(
            Problem(
                "parallel.context",
                f"is {c}: the sequence ({seq} tokens, training.seq_len) does not split into "
                f"2 x {c} = {2 * c} equal chunks (the causal load-balanced split); expected a "
                f"context size whose double divides {seq}",
                "E-LAYOUT",
            )
        )
    heads = s.model.heads
    if p.context_comm == "all_to_all" and heads is not None:
        per_tp = heads // p.tensor if heads % p.tensor == 0 else None
        if per_tp is not None and per_tp % c:
            problems.append(
                Problem(
                    "parallel.context",
                    f"is {c} with context_comm: all_to_all, which splits the heads over it, but "
                    f"the {per_tp} heads of each tensor-parallel rank (model.heads {heads} / "
                    f"tensor {p.tensor}) are not divisible by {c} (expected one of "
                    f"{_divisors_near(per_tp)}, or context_comm: ring)",
                    "E-LAYOUT",
                )
            )
    return problems


def _hsdp_problems(s: Scenario) -> list[Problem]:
    p, g = s.parallel, s.parallel.shard_group
    problems = []
    weights_sharded = p.shard.weights if p.shard.weights is not None else p.zero_stage == 3
    if p.reshard_after_forward is not None and not weights_sharded:
        problems.append(
            Problem(
                "parallel.reshard_after_forward",
                f"is {str(p.reshard_after_forward).lower()}, but the weights are not sharded "
                f"(zero_stage {p.zero_stage}); expected zero_stage: 3 (FSDP) or "
                "shard.weights: true, or no reshard_after_forward",
                "E-LAYOUT",
            )
        )
    if g is None or p.data % g == 0:
        return problems
    why = (
        f"is {g}: the data-parallel size ({p.data}, parallel.data) is not a multiple of it "
        f"(replicas x shard_group = data; expected one of {_divisors_near(p.data)})"
    )
    return [*problems, Problem("parallel.shard_group", why, "E-LAYOUT")]


def _layout(path: str, message: str) -> Problem:
    return Problem(path, message, "E-LAYOUT")


def _expert_problems(s: Scenario) -> list[Problem]:
    """Expert parallelism splits the routed experts over ranks of the pipeline stage: e
    (x expert_tensor) must divide tensor x context x data, and e the experts."""
    e, experts, par = s.parallel.expert, s.model.experts, s.parallel
    apart = [c for c, tier in plain_fields(s.placement.experts).items() if tier is not None]
    if apart and experts is None:
        what = "a home for the routed experts' state needs a mixture-of-experts model"
        return [_layout(f"placement.experts.{apart[0]}", f"is set, but {what} (model.experts)")]
    et = par.expert_tensor
    if et is not None and experts is None and et != par.tensor:
        what = "expert tensor parallelism needs a mixture-of-experts model (model.experts)"
        return [_layout("parallel.expert_tensor", f"is {et}, but {what}")]
    if e == 1 and (et is None or et == par.tensor):
        return []
    if experts is None:
        what = "expert parallelism needs a mixture-of-experts model (model.experts)"
        return [_layout("parallel.expert", f"is {e}, but {what}")]
    problems = []
    if et is None and par.context == 1:  # the classic layout: experts over data ranks
        if par.data % e:
            why = f"the data-parallel size ({par.data}) is not a multiple of it"
            problems.append(_layout("parallel.expert", f"is {e}: {why} (expected a divisor)"))
    else:
        ranks = par.tensor * par.context * par.data
        et = et or par.tensor
        if ranks % (e * et):
            why = (
                f"expert x expert_tensor ({e} x {et} = {e * et}) does not divide the ranks of a "
                f"pipeline stage, tensor x context x data ({par.tensor} x {par.context} x "
                f"{par.data} = {ranks})"
            )
            problems.append(_layout("parallel.expert", f"is {e}: {why} ({_sizes(ranks, et)})"))
        if et > 1 and (s.model.expert_ffn_hidden or s.model.ffn_hidden or 0) % et:
            width = s.model.expert_ffn_hidden or s.model.ffn_hidden
            why = f"the expert FFN width ({width}) is not divisible by it"
            problems.append(_layout("parallel.expert_tensor", f"is {et}: {why}"))
    if experts % e:
        why = f"the experts ({experts}) do not split evenly over it"
        problems.append(_layout("parallel.expert", f"is {e}: {why} (expected a divisor)"))
    return problems


def _imbalance_problems(s: Scenario) -> list[Problem]:
    """The busiest of e expert ranks receives at most every row its group routes to it: each
    of the e ranks' T tokens sends it at most min(k, E/e) rows (a token's k experts are
    distinct, E/e of them on that rank), against the mean k·T: an imbalance of at most
    e·min(k, E/e)/k. More is no routing's outcome (review 2026-12-07-g)."""
    par, experts, k = s.parallel, s.model.experts, s.model.experts_per_token
    e = par.expert
    if e == 1 or experts is None or k is None or experts % e or s.model.capacity_factor:
        return []  # nothing to bound (a capacity factor caps it: a note), or refused already
    most = e * min(k, experts // e) / k
    if par.expert_imbalance <= most:
        return []
    why = (
        f"is {par.expert_imbalance:g}, more than the busiest of {e} expert ranks can receive: "
        f"every token of the group sends it at most min(k, experts / expert) = "
        f"min({k}, {experts // e}) rows against the mean k = {k}, so at most "
        f"{e} x {min(k, experts // e)} / {k} = {most:g} (expected 1 to {most:g})"
    )
    return [_layout("parallel.expert_imbalance", why)]


def _sizes(ranks: int, et: int) -> str:
    """What to expect of an expert size that does not fit: the sizes k with k x `et` dividing
    the stage's `ranks` (the largest four), or, where `et` itself does not divide them (no
    expert size then does), an expert_tensor that does."""
    fits = [k for k in range(1, ranks + 1) if ranks % (k * et) == 0]
    if not fits:
        return f"expected an expert_tensor that divides {ranks}: with {et}, no expert size does"
    return "expected one of " + ", ".join(map(str, fits[-4:]))
