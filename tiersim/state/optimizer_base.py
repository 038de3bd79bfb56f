"""An optimizer as an object (state/optimizers.py holds the registry of them): its state per
parameter tensor, its update's cost, its step's temporaries, the PyTorch optimizer `measure`
builds, and what the rest of tiersim asks of it in place of its name. Adam and AdamW here;
8-bit AdamW in state/adamw8bit.py, Muon in state/muon.py.

A "tensor" is state/layers.py's Matrix (`count` tensors of rows x cols, cols == 1 for a vector;
`linear_shapes()` their nn.Linear [out, in] orientation, which decides Muon's sharded step);
`value_bytes` the optimizer precision's bytes a value. Of tiersim this imports only
state/muon_sharded.py and state/single_tensor_adam.py, so the scenario format can use it.

What DeepSpeed runs as its Muon (`deepspeed_whole_matrices`): engine.py 007cca6a builds
MuonWithAuxAdam, whose ZeRO-1/2/3 optimizers apply the update in their gradient reduction on
whole matrices: DeepSpeed refuses it with `reduce_scatter` true, ZeRO-3 on the GPU needs
save_muon_momentum_buffer_in_memory (config/deepspeed.py, state/deepspeed_muon.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tiersim.state import muon_sharded, single_tensor_adam


class Tensors(Protocol):
    rows: int
    cols: int
    count: int

    def linear_shapes(self) -> tuple[tuple[int, int, int], ...]: ...


Collectives = tuple[muon_sharded.Collective, ...]

FP32 = 4


def values_of(t: Tensors) -> int:
    """Values in one of the tensors."""
    return t.rows * t.cols


def is_matrix(t: Tensors) -> bool:
    return t.cols > 1


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
    # what the rest of tiersim asks of it, so no module compares its name (tests/test_layout.py):
    cpu_rated: bool = False  # the CPU rates time its CPU step (torch's AdamW, DeepSpeed's CPU-Adam)
    apex_distributed: bool = False  # NeMo's apex DistributedFusedAdam steps it (Adam, AdamW)
    adamw_state: bool = False  # its state is AdamW's, tensor for tensor (exp_avg, exp_avg_sq)
    fsdp2_step_order: int | None = None  # its place in `measure --fsdp`'s list (None: not run)
    fsdp2_title: str = ""  # what `measure --fsdp`'s title calls it ("": its name)
    deepspeed_type: str = ""  # DeepSpeed config's optimizer.type ("": DeepSpeed has none)
    deepspeed_whole_matrices: bool = False  # DeepSpeed ZeRO runs it as its Muon (below)
    megatron_optimizer: str = ""  # Megatron-LM's --optimizer for it ("": none)
    megatron_runs_instead: str = ""  # what that flag runs where it is not this one
    torchtitan_name: str = ""  # torchtitan's [optimizer] name ("": none)

    @property
    def values_per_parameter(self) -> int | None:  # the name classes.py's table used
        return self.moments

    def state_bytes(self, tensors: Iterable[Tensors], value_bytes: int) -> int:
        """Bytes of optimizer state these tensors keep."""
        return sum(self.tensor_state_bytes(t, value_bytes) for t in tensors)

    def tensor_state_bytes(self, t: Tensors, value_bytes: int) -> int:
        n = values_of(t) * t.count
        if self.moments is None:  # factored: a row and a column statistic per matrix
            return (t.rows + t.cols if is_matrix(t) else t.rows) * t.count * value_bytes
        return self.moments * n * value_bytes

    def update_flops(self, tensors: Iterable[Tensors]) -> float:
        """Arithmetic of one update of these tensors."""
        return sum(self.flops_per_value * values_of(t) * t.count for t in tensors)

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
    def own_state_precision(self) -> str:
        """Why `training.precision.optimizer` changes none of its bytes ("": the state is
        kept at that precision)."""
        return ""

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
