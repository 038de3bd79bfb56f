"""The parallel layout of a run: one object that owns it (after torchtitan's `ParallelDims`).

A `Mesh` holds the degree of every parallel axis, their order and strides over the ranks,
which group each collective runs over, and where a group falls on GPUs and nodes. Nothing
else computes a group size or a stride: the collectives, the workload's communication and the
state's sharding ask the Mesh.

Axes (Megatron-Core's default rank order "tp-cp-ep-dp-pp", `initialize_model_parallel`):
- tensor (t, stride 1), context (c, stride t), data (d, stride t·c), pipeline (p, stride
  t·c·d): world = t · c · d · p.
- data = replicate x shard (HSDP, `parallel.shard_group` = s): the shard axis is the inner
  one (torchtitan's mesh order pp, dp_replicate, dp_shard, cp, tp).
- The expert layers see the same t·c·d ranks of a pipeline stage as a second mesh
  (Megatron-Core's expert order "tp-ep-dp-pp"): expert_tensor (et, stride 1), expert (e,
  stride et), expert_data (t·c·d / (et·e), stride et·e). With et = t (the default) and c = 1
  this is the familiar layout: experts over e consecutive data-parallel ranks, t apart.

Groups (what each collective runs over):
- `tensor`: tensor-parallel collectives; `context`: the ring / gather / all-to-all of
  context-parallel attention; `pipeline`: stage-to-stage sends;
- `data`: the gradient reduction and ZeRO/FSDP sharding group, data x context (frameworks
  reduce gradients over every rank that saw other tokens: Megatron-Core's dp-cp group):
  d·c ranks t apart, since context is inside data;
- `shard` / `replicate`: HSDP's two levels (shard = s·c ranks t apart; replicate = d/s ranks
  t·c·s apart); without `shard_group` shard is the data group and replicate one rank;
- `expert`, `expert_tensor`, `expert_data`: the expert mesh's groups;
- `embedding`: the first and last pipeline stage (the tied embedding's gradients).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from tiersim.config.schema import Parallel, Scenario
from tiersim.core.errors import Problem

# every group a collective can run over, and the axes of the mesh each one spans
GROUP_AXES: dict[str, tuple[str, ...]] = {
    "tensor": ("tensor",),
    "context": ("context",),
    "data": ("data", "context"),
    "shard": ("shard", "context"),
    "replicate": ("replicate",),
    "pipeline": ("pipeline",),
    "expert": ("expert",),
    "expert_tensor": ("expert_tensor",),
    "expert_data": ("expert_data",),
    "embedding": ("pipeline",),
}


@dataclass(frozen=True)
class Group:
    """Ranks a, a + stride, ..., a + (size - 1)·stride."""

    size: int
    stride: int


@dataclass(frozen=True)
class Mesh:
    """Degrees of every axis of one run's parallel layout; groups and strides derive from them."""

    tensor: int = 1
    context: int = 1
    data: int = 1
    pipeline: int = 1
    expert: int = 1
    expert_tensor: int = 1
    shard: int = 1  # the data axis's inner (FSDP shard) part; data / shard replicas

    def __post_init__(self) -> None:
        for name in ("tensor", "context", "data", "pipeline", "expert", "expert_tensor", "shard"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}(={getattr(self, name)}) must be >= 1")
        if self.data % self.shard:
            raise ValueError(f"shard(={self.shard}) must divide data(={self.data})")
        if self.stage_ranks % (self.expert * self.expert_tensor):
            raise ValueError(
                f"expert x expert_tensor (={self.expert} x {self.expert_tensor}) must divide "
                f"tensor x context x data (={self.stage_ranks})"
            )

    @classmethod
    def of(cls, par: Parallel) -> Mesh:
        """The mesh a scenario's `parallel` section describes (validated by `mesh_problems`)."""
        return _mesh_of(par)

    # --- degrees --------------------------------------------------------------------------

    @property
    def stage_ranks(self) -> int:
        """Ranks of one pipeline stage: tensor x context x data."""
        return self.tensor * self.context * self.data

    @property
    def world(self) -> int:
        """GPUs in the run: data x tensor x pipeline x context."""
        return self.stage_ranks * self.pipeline

    @property
    def replicate(self) -> int:
        return self.data // self.shard

    @property
    def expert_data(self) -> int:
        """Ranks holding the same experts: tensor·context·data / (expert_tensor·expert)."""
        return self.stage_ranks // (self.expert * self.expert_tensor)

    @property
    def dense_shard_ranks(self) -> int:
        """Ranks dense state is ZeRO/FSDP-sharded over: the shard group (x context)."""
        return self.shard * self.context

    @property
    def expert_shard_ranks(self) -> int:
        """Ranks a routed expert's state is sharded over: its expert-data group, in HSDP the
        part of it inside one shard group."""
        if self.shard == self.data:
            return self.expert_data
        return max(1, self.expert_data // self.replicate)

    # --- strides and groups ---------------------------------------------------------------

    def strides(self) -> dict[str, int]:
        """Distance between consecutive members of each axis's groups."""
        t, c, d, s = self.tensor, self.context, self.data, self.shard
        et, e = self.expert_tensor, self.expert
        return {
            "tensor": 1,
            "context": t,
            "data": t * c,
            "shard": t * c,
            "replicate": t * c * s,
            "pipeline": t * c * d,
            "expert_tensor": 1,
            "expert": et,
            "expert_data": et * e,
        }

    def group(self, name: str) -> Group:
        """The group collective `name` runs over (see the module docstring)."""
        t, c, st = self.tensor, self.context, self.strides()
        if name == "embedding":
            if self.pipeline == 1:
                return Group(1, 1)
            return Group(2, st["pipeline"] * (self.pipeline - 1))
        sizes = {
            "tensor": (t, 1),
            "context": (c, t),
            "data": (self.data * c, t),  # data x context: context is inside data
            "shard": (self.shard * c, t),
            "replicate": (self.replicate, st["replicate"]),
            "pipeline": (self.pipeline, st["pipeline"]),
            "expert": (self.expert, st["expert"]),
            "expert_tensor": (self.expert_tensor, 1),
            "expert_data": (self.expert_data, st["expert_data"]),
        }
        if name not in sizes:
            raise ValueError(f"no parallel group {name!r} (expected one of {sorted(GROUP_AXES)})")
        size, stride = sizes[name]
        return Group(size, stride if size > 1 else 1)

    def placement(self, name: str, gpus_per_node: int) -> tuple[int, int]:
        """(fewest members of one group in a node, most nodes one group spans)."""
        g = self.group(name)
        return group_placement(g.size, g.stride, gpus_per_node)

    def axes_of(self, name: str) -> list[str]:
        """The mesh axes (of degree > 1) that group `name` spans, e.g. ['data', 'context']."""
        degree = {
            "tensor": self.tensor,
            "context": self.context,
            "data": self.data,
            "shard": self.shard,
            "replicate": self.replicate,
            "pipeline": self.pipeline,
            "expert": self.expert,
            "expert_tensor": self.expert_tensor,
            "expert_data": self.expert_data,
        }
        return [a for a in GROUP_AXES[name] if degree[a] > 1]

    def describe(self) -> str:
        """`tensor 8 x context 2 x data 4 x pipeline 2 = 128 GPUs` (axes of degree > 1)."""
        parts = [
            f"{name} {getattr(self, name)}"
            for name in ("tensor", "context", "data", "pipeline")
            if getattr(self, name) > 1
        ]
        text = " x ".join(parts) or "one GPU"
        extra = []
        if self.shard != self.data:
            extra.append(f"data = {self.replicate} replicas x shard {self.shard}")
        if self.expert > 1:
            extra.append(
                f"experts: expert_tensor {self.expert_tensor} x expert {self.expert} "
                f"x expert_data {self.expert_data}"
            )
        tail = f" ({'; '.join(extra)})" if extra else ""
        return f"{text} = {self.world} GPUs{tail}"


@functools.cache
def _mesh_of(par: Parallel) -> Mesh:
    return Mesh(
        tensor=par.tensor,
        context=par.context,
        data=par.data,
        pipeline=par.pipeline,
        expert=par.expert,
        expert_tensor=par.expert_tensor or par.tensor,
        shard=par.shard_group or par.data,
    )


# --- placement over nodes -----------------------------------------------------------------------


@functools.cache  # a pure function of three counts, asked for by every unit's every group
def group_placement(size: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(fewest members any group has in one node, most nodes any group spans), over every
    group of the layout: ranks a, a + stride, ..., a + (size - 1)·stride. A group's placement
    depends only on a mod gpus_per_node, so at most gpus_per_node starts are worked out, each
    from its first, last and at most one period of interior nodes: no work grows with size."""
    g = gpus_per_node
    if size == 1:
        return 1, 1
    if stride >= g:  # consecutive members at least a node apart: one a node
        return 1, size
    block = size * stride
    starts = {(base + offset) % g for base in range(0, math.lcm(block, g), block)[:g]
              for offset in range(stride)}  # fmt: skip
    fewest, most = size, 1
    for a in starts:
        per_node, nodes = _progression(a, size, stride, g)
        fewest, most = min(fewest, per_node), max(most, nodes)
    return fewest, most


def _progression(a: int, size: int, stride: int, g: int) -> tuple[int, int]:
    """(fewest members in a node, nodes spanned) of ranks a + k·stride, k < size, with
    0 <= a < g and stride < g: every node from the first to the last holds some."""
    last = (a + (size - 1) * stride) // g

    def members(j: int) -> int:  # k with j·g <= a + k·stride < (j + 1)·g
        lo = max(0, -((a - j * g) // stride))  # ceil((j·g - a) / stride)
        hi = min(size - 1, (j * g + g - 1 - a) // stride)
        return hi - lo + 1

    # interior nodes hold g // stride or one more, in a pattern with period stride / gcd
    period = stride // math.gcd(g, stride)
    interior = range(1, min(last, 1 + period))
    return min(members(0), members(last), *map(members, interior)), last + 1


# --- validation ---------------------------------------------------------------------------------


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
                f" (expected a divisor, or parallel.stage_layers: {chunks} entries, e.g. "
                f"{list(even_split(m.layers, chunks))})",
            )
        )
    if p.virtual_pipeline > 1 and p.pipeline == 1:
        problems.append(Problem("parallel.virtual_pipeline", "interleaving needs pipeline > 1"))
    m_b = s.training.grad_accumulation
    if p.virtual_pipeline > 1 and m_b % p.pipeline:
        problems.append(
            Problem(
                "training.grad_accumulation",
                f"interleaving needs the micro-batches ({m_b}) to be a multiple of the pipeline "
                f"size ({p.pipeline}) (Narayanan et al. 2021, §2.2.2)",
            )
        )
    return problems


def _tensor_problems(s: Scenario) -> list[Problem]:
    p, m = s.parallel, s.model
    problems = []
    if m.heads is not None and m.heads % p.tensor:
        problems.append(
            Problem(
                "parallel.tensor",
                f"heads ({m.heads}) are not divisible by the tensor-parallel size ({p.tensor})",
            )
        )
    kv = m.kv_heads or m.heads
    if kv is not None and kv % p.tensor and p.tensor % kv:
        problems.append(
            Problem(
                "parallel.tensor",
                f"kv_heads ({kv}) and the tensor-parallel "
                f"size ({p.tensor}) must divide one another",
            )
        )
    return problems


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
    return [Problem("parallel.stage_layers", why)]


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
            )
        )
        return problems
    if layers is not None and sum(split) != layers:
        problems.append(
            Problem(
                "parallel.stage_layers",
                f"sums to {sum(split)} layers, but the model has {layers} (expected entries "
                f"that sum to {layers}, e.g. {list(even_split(layers, chunks))})",
            )
        )
    empty = [k for k in range(p.pipeline) if not sum(split[k :: p.pipeline])]
    if empty:
        problems.append(
            Problem(
                "parallel.stage_layers",
                f"leaves pipeline stage {empty[0]} without a layer (expected at least one "
                "layer in every stage's chunks)",
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
            )
        )
    if g is None or p.data % g == 0:
        return problems
    why = (
        f"is {g}: the data-parallel size ({p.data}, parallel.data) is not a multiple of it "
        f"(replicas x shard_group = data; expected one of {_divisors_near(p.data)})"
    )
    return [*problems, Problem("parallel.shard_group", why)]


def _expert_problems(s: Scenario) -> list[Problem]:
    """Expert parallelism splits the routed experts over ranks of the pipeline stage: e
    (x expert_tensor) must divide tensor x context x data, and e the experts."""
    e, experts, par = s.parallel.expert, s.model.experts, s.parallel
    apart = [c for c, tier in s.placement.experts.model_dump().items() if tier is not None]
    if apart and experts is None:
        what = "a home for the routed experts' state needs a mixture-of-experts model"
        return [Problem(f"placement.experts.{apart[0]}", f"is set, but {what} (model.experts)")]
    et = par.expert_tensor
    if et is not None and experts is None and et != par.tensor:
        what = "expert tensor parallelism needs a mixture-of-experts model (model.experts)"
        return [Problem("parallel.expert_tensor", f"is {et}, but {what}")]
    if e == 1 and (et is None or et == par.tensor):
        return []
    if experts is None:
        what = "expert parallelism needs a mixture-of-experts model (model.experts)"
        return [Problem("parallel.expert", f"is {e}, but {what}")]
    problems = []
    if et is None and par.context == 1:  # the classic layout: experts over data ranks
        if par.data % e:
            why = f"the data-parallel size ({par.data}) is not a multiple of it"
            problems.append(Problem("parallel.expert", f"is {e}: {why} (expected a divisor)"))
    else:
        ranks = par.tensor * par.context * par.data
        et = et or par.tensor
        if ranks % (e * et):
            why = (
                f"expert x expert_tensor ({e} x {et} = {e * et}) does not divide the ranks of a "
                f"pipeline stage, tensor x context x data ({par.tensor} x {par.context} x "
                f"{par.data} = {ranks})"
            )
            fits = [k for k in range(1, ranks // et + 1) if (ranks // et) % k == 0]
            hint = ", ".join(map(str, fits[-4:]))
            problems.append(Problem("parallel.expert", f"is {e}: {why} (expected one of {hint})"))
        if et > 1 and (s.model.expert_ffn_hidden or s.model.ffn_hidden or 0) % et:
            width = s.model.expert_ffn_hidden or s.model.ffn_hidden
            why = f"the expert FFN width ({width}) is not divisible by it"
            problems.append(Problem("parallel.expert_tensor", f"is {et}: {why}"))
    if experts % e:
        why = f"the experts ({experts}) do not split evenly over it"
        problems.append(Problem("parallel.expert", f"is {e}: {why} (expected a divisor)"))
    return problems
