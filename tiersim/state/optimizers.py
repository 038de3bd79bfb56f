"""Optimizers as objects, one registry: what each keeps per parameter tensor, what its update
costs, what temporaries its step allocates and which PyTorch optimizer `tiersim measure`
builds for it. Nothing else names an optimizer (`training.optimizer` takes REGISTRY's names).

A "tensor" is state/layers.py's Matrix (`count` tensors of rows x cols, cols == 1 for a vector;
`linear_shapes()` their nn.Linear [out, in] orientation, which decides Muon's sharded step);
`value_bytes` the optimizer precision's bytes a value. Of tiersim this imports only
state/muon_sharded.py and state/torchao_adamw8bit.py, so the scenario format can use the names.

Sources, per optimizer:
- adam / adamw: exp_avg and exp_avg_sq (torch.optim.Adam/AdamW; Kingma and Ba 2015).
- sgd / sgd_momentum: none / a momentum buffer; lion: one momentum (Chen et al. 2023).
- adafactor: row and column statistics per matrix (Shazeer and Stern 2018).
- adamw8bit: bitsandbytes' block-wise 8-bit AdamW (Dettmers et al. 2022; bitsandbytes 0.50.2,
  whose CPU backend `measure` runs), optim/optimizer.py Optimizer2State.init_state: `state1`,
  `state2` uint8 of the parameter's shape and, block-wise, `absmax1`, `absmax2` fp32 of
  ceil(n / 256) values each; a tensor of fewer than `min_8bit_size` = 4096 values keeps 32-bit
  (fp32) state1 and state2 instead. On FSDP2's DTensors, which bitsandbytes refuses,
  torchao's AdamW8bit (state/torchao_adamw8bit.py).
- muon: torch.optim.Muon (torch/optim/_muon.py, after K. Jordan's muon.py): a momentum buffer
  of the parameter's shape for 2-D matrices; Newton-Schulz runs `ns_steps` = 5 quintic
  iterations on the bf16 update (m <= n after a transpose): X Xᵀ (2m²n FLOPs), A + A·A (2m³)
  and B·X (2m²n) each. Embeddings, the output head and every 1-D parameter take AdamW
  (two moments), as Muon's authors prescribe (torch.optim.Muon refuses non-2-D tensors).
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tiersim.state import muon_sharded, single_tensor_adam, torchao_adamw8bit


class Tensors(Protocol):
    rows: int
    cols: int
    count: int

    def linear_shapes(self) -> tuple[tuple[int, int, int], ...]: ...


Collectives = tuple[muon_sharded.Collective, ...]


FP32 = 4
BNB_BLOCK = 256  # bitsandbytes' block-wise quantisation block (Optimizer2State.init_state)
BNB_MIN_8BIT = 4096  # min_8bit_size: smaller tensors keep 32-bit state
NS_STEPS = muon_sharded.NS_STEPS  # torch.optim.Muon's default ns_steps
newton_schulz_flops, largest_set = muon_sharded.newton_schulz_flops, muon_sharded.largest_set_bytes


def _values(t: Tensors) -> int:
    return t.rows * t.cols


def _matrix(t: Tensors) -> bool:
    return t.cols > 1


def takes_muon(t: Tensors) -> bool:
    """Muon updates a layer's matrix; embeddings, the head and 3-D tensors go to AdamW."""
    return _matrix(t) and not getattr(t, "embedding", False) and not getattr(t, "fused", False)


@dataclass(frozen=True)
class Optimizer:
    """One optimizer: its state per tensor, its update's cost, its step's temporaries."""

    name: str
    moments: int | None  # state values per parameter (None: factored, or by tensor)
    flops_per_value: float  # elementwise update arithmetic per parameter value
    torch_name: str | None  # the torch.optim class `measure` builds (None: not in PyTorch)
    torch_options: tuple[tuple[str, float], ...] = ()  # its keyword arguments beside lr
    shapes: str = ""  # why it needs the weight matrices' shapes ("": it does not)
    foreach_list: bool = False  # CUDA's step temporaries: a list, a tensor a parameter (Adam)

    @property
    def values_per_parameter(self) -> int | None:  # the name classes.py's table used
        return self.moments

    def state_bytes(self, tensors: Iterable[Tensors], value_bytes: int) -> int:
        """Bytes of optimizer state these tensors keep."""
        return sum(self.tensor_state_bytes(t, value_bytes) for t in tensors)

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        n = _values(t) * t.count
        if self.moments is None:  # factored: a row and a column statistic per matrix
            return (t.rows + t.cols if _matrix(t) else t.rows) * t.count * value_bytes
        return self.moments * n * value_bytes

    def update_flops(self, tensors: Iterable[Tensors]) -> float:
        """Arithmetic of one update of these tensors."""
        return sum(self.flops_per_value * _values(t) * t.count for t in tensors)

    def update_gemm_flops(self, tensors: Iterable[Tensors]) -> float:
        """The part of it that runs as matrix multiplications (elementwise updates: none;
        they are bound by the bytes they touch)."""
        return 0.0

    def sharded_collectives(self, tensors: Iterable[Tensors], shards: int) -> Collectives:
        """The collectives the step runs on one rank where each weight is sharded over
        `shards` ranks (FSDP2's DTensors), as (op, bytes of the whole tensor, calls), one entry
        per op and size: none for an elementwise update, which needs only the rank's shard."""
        return ()

    def whole_gemm_flops(self, tensors: Iterable[Tensors], shards: int) -> float:
        """The part of `update_gemm_flops` each rank runs whole, not its share, where weights
        are sharded over `shards` ranks: none for an elementwise update."""
        return 0.0

    def step_temporary_bytes(
        self,
        values: int,
        largest: int,
        value_bytes: int,
        device: str,
        tensors: Sequence = (),
        shards: int = 1,
        dtensors: bool = False,
        cpu_gemm: str = "onednn",
    ) -> int:
        """The largest set of temporaries the step holds at once beside the state, for a rank
        updating `values` parameters whose largest tensor has `largest` values (`tensors`: the
        rank's, where an optimizer treats them apart): torch.optim's foreach path (CUDA's
        default) makes one list the size of all the rank's tensors, the single-tensor path
        (CPU's) one tensor's at a time; `shards`: the ranks each weight is sharded over (FSDP2's
        DTensors), for an optimizer whose step gathers them; `dtensors`: the parameters are
        FSDP2's DTensors (on one rank too), for an optimizer built otherwise for them;
        `cpu_gemm`: the CPU's bf16 GEMM route (Accounting.cpu_gemm), for matrix updates."""
        return 0

    def dtensor_state_bytes(
        self, tensors: Iterable[Tensors], value_bytes: int, shards: int
    ) -> int | None:
        """Rank 0's state where each tensor is FSDP2's DTensor cut on its first dimension
        over `shards` ranks, for an optimizer whose state is decided on the local shard; None:
        the whole tensors' state, sharded as the other classes (state/sharding.py)."""
        return None

    @property
    def measurable(self) -> bool:
        """`measure` can build it (torch.optim's, or a package's the measure extra installs)."""
        return self.torch_name is not None

    @property
    def reported_apart(self) -> str:
        """What `measure` leaves out of the optimizer class (per optimizer, not per value)."""
        return "scalar step counters"

    def missing(self, dtensors: bool = False) -> str | None:
        """Why `build` cannot run here (a package not installed; `dtensors`: on DTensors)."""
        return None

    def dtensor_refusal(self, dtype: str) -> str | None:
        """Why what `build` makes cannot step FSDP2's DTensors of `dtype`, else None."""
        return None

    def build(self, torch: Any, named: list[tuple[str, Any]], lr: float = 1e-4) -> list:
        """The PyTorch optimizers `measure` steps for these (name, parameter) pairs."""
        if self.torch_name is None:
            raise ValueError(f"PyTorch has no {self.name} optimizer")
        cls = getattr(torch.optim, self.torch_name)
        return [cls([p for _, p in named], lr=lr, **dict(self.torch_options))]


@dataclass(frozen=True)
class AdamLike(Optimizer):
    """Adam and AdamW: the step's denominator sqrt(v)/c + eps is a new tensor. The foreach
    path (_multi_tensor_adam: `_foreach_sqrt`, then in place) holds one state-sized list; the
    single-tensor path two of one tensor beside the previous one's (state/single_tensor_adam.py)."""

    def step_temporary_bytes(
        self,
        values: int,
        largest: int,
        value_bytes: int,
        device: str,
        tensors: Sequence = (),
        shards: int = 1,
        dtensors: bool = False,
        cpu_gemm: str = "onednn",
    ) -> int:
        if device == "cpu":
            return single_tensor_adam.peak_values(tensors, shards, largest) * value_bytes
        return values * value_bytes


@dataclass(frozen=True)
class AdamW8bit(Optimizer):
    """bitsandbytes' AdamW8bit (the `measure` extra installs bitsandbytes, whose CPU backend
    runs it); on FSDP2's DTensors, which bitsandbytes refuses, torchao's (the extra installs
    torchao; state/torchao_adamw8bit.py): its state decided on the rank's shard, its eager
    update's transients."""

    @property
    def measurable(self) -> bool:
        return True

    @property
    def reported_apart(self) -> str:
        return "scalar step counters and the two 256-value quantisation maps all tensors share"

    def missing(self, dtensors: bool = False) -> str | None:
        package = "torchao" if dtensors else "bitsandbytes"
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed: pip install 'tiersim[measure]'"
        return None

    def dtensor_refusal(self, dtype: str) -> str | None:
        if dtype == "fp32":
            return None
        return "torchao's AdamW8bit (0.18.0), the one that steps DTensors, refuses 16-bit ones"

    def build(self, torch: Any, named: list[tuple[str, Any]], lr: float = 1e-4) -> list:
        params = [p for _, p in named]
        from torch.distributed.tensor import DTensor

        if any(isinstance(p, DTensor) for p in params):
            if self.missing(dtensors=True):
                raise ValueError(self.missing(dtensors=True))
            return [torchao_adamw8bit.build_for_dtensors(torch, params, lr)]
        try:
            import bitsandbytes
        except ImportError:
            raise ValueError(self.missing() or "bitsandbytes does not import") from None
        return [bitsandbytes.optim.AdamW8bit(params, lr=lr)]

    def step_temporary_bytes(
        self,
        values: int,
        largest: int,
        value_bytes: int,
        device: str,
        tensors: Sequence = (),
        shards: int = 1,
        dtensors: bool = False,
        cpu_gemm: str = "onednn",
    ) -> int:
        """CUDA's blockwise kernel updates in place; the CPU backend (backends/cpu/ops.py,
        _optimizer_update_8bit_blockwise_cpu) works one tensor at a time in fp32: both moments
        dequantized (4 + 4 B a value), the gradient upcast and scaled (4), a 16-bit
        parameter's fp32 copy (4), and sqrt(v) beside sqrt(v) / c (4 + 4). On DTensors,
        torchao's eager update, one local shard at a time."""
        if device != "cpu":
            return 0
        if dtensors and tensors:
            return torchao_adamw8bit.update_bytes(tensors, shards, largest, value_bytes)
        return (20 + (FP32 if value_bytes != FP32 else 0)) * largest

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        n = _values(t)
        if n < BNB_MIN_8BIT:
            return 2 * n * FP32 * t.count
        return (2 * n + 2 * FP32 * math.ceil(n / BNB_BLOCK)) * t.count

    def dtensor_state_bytes(
        self, tensors: Iterable[Tensors], value_bytes: int, shards: int
    ) -> int | None:
        return torchao_adamw8bit.shards_state_bytes(tensors, value_bytes, shards)


@dataclass(frozen=True)
class Muon(Optimizer):
    """Muon on the layers' 2-D matrices (one momentum buffer), AdamW (two moments) on the
    embeddings, the output head and every vector."""

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        return (1 if takes_muon(t) else 2) * _values(t) * t.count * value_bytes

    def update_flops(self, tensors: Iterable[Tensors]) -> float:
        return sum(
            newton_schulz_flops(t.rows, t.cols) * t.count
            + self.flops_per_value * _values(t) * t.count
            if takes_muon(t)
            else 13.0 * _values(t) * t.count
            for t in tensors
        )

    def update_gemm_flops(self, tensors: Iterable[Tensors]) -> float:
        return sum(newton_schulz_flops(t.rows, t.cols) * t.count for t in tensors if takes_muon(t))

    def step_temporary_bytes(
        self,
        values: int,
        largest: int,
        value_bytes: int,
        device: str,
        tensors: Sequence = (),
        shards: int = 1,
        dtensors: bool = False,
        cpu_gemm: str = "onednn",
    ) -> int:
        # one matrix at a time (no foreach), state/muon_sharded.py: Nesterov's update
        # grad.lerp(buf) in the state's precision, its bf16 copy X (2 B), the Gram matrix and
        # its quintic update (2 x 2m²), the next X (2 B) and, where the CPU's bf16 GEMMs take
        # oneDNN (`cpu_gemm`), its packed copy of X; sharded over ranks, each matrix gathered
        # whole on every rank in turn, or its Gram matrix all-reduced, as its orientation has it.
        # The rest (embeddings, head, vectors, 3-D experts) is AdamW's, after Muon's step: the
        # larger of the two. Without the tensors, all are Muon's, at an upper bound of
        # value_bytes + 8 B per value of the largest (2m² <= 2mn).
        if not tensors:
            return (value_bytes + 8) * largest
        shapes = [t.linear_shapes() for t in tensors if takes_muon(t)]
        sets = (largest_set(s, shards, value_bytes, device, cpu_gemm) for s in shapes)
        muon = max(sets, default=0)
        rest = [t for t in tensors if not takes_muon(t)]
        # a 3-D tensor holds many of its rows x cols: the largest, `largest` (its fused size)
        whole = [math.ceil(_values(t) / shards) for t in rest if not getattr(t, "fused", False)]
        fused = [largest for t in rest if getattr(t, "fused", False)]
        adamw = REGISTRY["adamw"].step_temporary_bytes(
            math.ceil(sum(_values(t) * t.count for t in rest) / shards),
            max(whole + fused, default=0),
            value_bytes,
            device,
        )
        return max(muon, adamw)

    @staticmethod
    def _sharded(tensors: Iterable[Tensors], shards: int):
        """(Newton-Schulz on one weight, how many such weights) for each layer matrix."""
        for t in tensors:
            if takes_muon(t):
                for out, inn, n in t.linear_shapes():
                    yield muon_sharded.ShardedNewtonSchulz(out, inn, shards), n

    def sharded_collectives(self, tensors: Iterable[Tensors], shards: int) -> Collectives:
        """Each matrix's, as DTensor runs them for its orientation (state/muon_sharded.py):
        the gathers of X and the Gram matrix (out <= in) or the Gram matrix's all-reduces (out
        > in), and X's norm's all-reduce."""
        calls: Counter = Counter()
        for ns, n in self._sharded(tensors, shards):
            for op, size, k in ns.collectives():
                calls[op, size] += k * n
        return tuple((op, size, k) for (op, size), k in calls.items())

    def whole_gemm_flops(self, tensors: Iterable[Tensors], shards: int) -> float:
        """A + A·A on the all-reduced Gram matrix of each out > in matrix, 2m³ an iteration."""
        return sum(ns.whole_flops() * n for ns, n in self._sharded(tensors, shards))

    def build(self, torch: Any, named: list[tuple[str, Any]], lr: float = 1e-4) -> list:
        """torch.optim.Muon on the layers' matrices, AdamW on the rest: embeddings, the head,
        vectors, a 1 x n matrix (Qwen2-MoE's shared-expert gate: a vector to Muon's authors and
        to tiersim's accounting, and one FSDP2 cannot step with Muon on more ranks than rows:
        `aten.add_.Tensor: in-place operations that require placement changes`) and tensors of
        3 dimensions (transformers 5's fused experts), which torch.optim.Muon refuses."""

        def takes(name: str, p: Any) -> bool:
            return p.ndim == 2 and min(p.shape) > 1 and not embedding_name(name)

        muon = [p for n, p in named if takes(n, p)]
        rest = [p for n, p in named if not takes(n, p)]
        return [torch.optim.Muon(muon, lr=lr), torch.optim.AdamW(rest, lr=lr)]


EMBEDDING_NAMES = ("embed", "wte", "wpe", "lm_head", "pos")  # tiersim's and transformers'


def embedding_name(name: str) -> bool:
    """A parameter's name says it is an embedding or the output head."""
    return any(part in name for part in EMBEDDING_NAMES)


OPTIMIZERS: tuple[Optimizer, ...] = (
    AdamLike("adam", 2, 12.0, "Adam", foreach_list=True),
    AdamLike("adamw", 2, 13.0, "AdamW", foreach_list=True),
    Optimizer("sgd", 0, 2.0, "SGD"),
    Optimizer("sgd_momentum", 1, 4.0, "SGD", (("momentum", 0.9),)),
    Optimizer(
        "adafactor",
        None,
        12.0,
        "Adafactor",
        shapes="keeps row and column statistics per weight matrix",
    ),
    Optimizer("lion", 1, 8.0, None),
    AdamW8bit("adamw8bit", 2, 13.0, None),
    Muon(
        "muon",
        1,
        4.0,
        "Muon",
        shapes="orthogonalises each weight matrix and keeps AdamW's moments for the rest",
    ),
)
REGISTRY: dict[str, Optimizer] = {o.name: o for o in OPTIMIZERS}
NAMES = tuple(REGISTRY)
IN_PYTORCH = tuple(o.name for o in OPTIMIZERS if o.measurable)  # what measure builds


def optimizer(name: str) -> Optimizer:
    """The optimizer called `name`; an unknown name is our bug (the format checked it)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"no optimizer {name!r} (expected one of {', '.join(NAMES)})") from None
