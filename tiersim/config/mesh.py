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

from tiersim.config.schema import Parallel
from tiersim.core.records import record

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


@record
class Group:
    """Ranks a, a + stride, ..., a + (size - 1)·stride."""

    size: int
    stride: int


@record
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
        """The mesh a scenario's `parallel` section describes (validated by `mesh_problems`).
        The section asked last is answered by identity (a point asks for its mesh about 20
        times; the cache by value hashes and compares the whole section each time, about
        8,000 instructions)."""
        latest = _latest  # one read: (section, its mesh), never a pair of two askers'
        if latest[0] is par:
            return latest[1]
        return _remembered(par)

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
        group = self._groups.get(name)
        if group is None:
            raise ValueError(f"no parallel group {name!r} (expected one of {sorted(GROUP_AXES)})")
        return group

    @functools.cached_property
    def _groups(self) -> dict[str, Group]:
        """Every group, worked out once a mesh (from its degrees alone): a point asks for one
        a score of times (each collective's link, the network's capacities)."""
        t, c, st = self.tensor, self.context, self.strides()
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
        out = {
            name: Group(size, stride if size > 1 else 1) for name, (size, stride) in sizes.items()
        }
        last = st["pipeline"] * (self.pipeline - 1)  # the first and the last stage
        out["embedding"] = Group(1, 1) if self.pipeline == 1 else Group(2, last)
        return out

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
        return f"{text} = {self.world:,} GPUs{tail}"


def _remembered(par: Parallel) -> Mesh:
    global _latest
    mesh = _mesh_of(par)
    _latest = (par, mesh)
    return mesh


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


_latest: tuple = (object(), None)  # the section `Mesh.of` answered last, and its mesh


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
