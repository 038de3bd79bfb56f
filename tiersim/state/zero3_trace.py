"""The order in which DeepSpeed ZeRO-3 fetches a step's parameters: its recorded trace of
submodules (deepspeed/runtime/zero/partitioned_param_coordinator.py, commit 00a31c99,
`record_module` / `construct_parameter_trace_from_module_trace`), as tiersim builds it from a
GPU's parameter tensors for the coordinator's rules (state/zero3_prefetch.py).

DeepSpeed hooks every module (parameter_offload.py `_register_deepspeed_module`, recursively)
and fetches each module's own parameters (`iter_params(module, recurse=False)`) before it runs.
Here, in each pass of a layer:
- a transformer layer's four modules without parameters of their own (the decoder layer, its
  attention, its MLP, the MLP's activation) first: each one's fetch gathers nothing but, as any
  fetch does, issues a prefetch;
- then every parameter tensor as the module it belongs to, in the order tiersim lists them
  (attention projections, MLP, biases, norms): a matrix is a linear layer, a vector a norm or
  a bias; transformers 5's fused experts (`implementation: huggingface`) are one module of two
  tensors; every tensor whole (DeepSpeed fetches a module's parameters whole, whatever
  `max_live_parameters` says).
The step: the embeddings, the layers, the final norm and head (the head's weight the
embedding's own where tied), then the backward in reverse; with full recompute each layer's
backward runs its forward again first (its checkpoint's hooks fire again). Not modelled: the
model's outer containers and the rotary embedding module (a few more prefetch rounds a step),
the order of a layer's tensors beyond tiersim's listing, and ZeRO-Infinity's memory-centric
tiling (an operator the engine tiles, workload/fetch.py, is counted whole here)."""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.state.inventory import rank_matrices
from tiersim.state.layers import Matrix
from tiersim.state.model import Transformer
from tiersim.state.model_shapes import UnitKind
from tiersim.state.resolved import Resolved

LAYER_CONTAINERS = 4  # decoder layer, attention, MLP, activation: hooked, no parameters


@record
class Trace:
    """Each parameter's values (`numel[p]`) and each fetch of the step in order: the moment of
    the memory timeline it runs in and the parameters it gathers."""

    numel: tuple[int, ...]
    steps: tuple[tuple[str, tuple[int, ...]], ...]


class _Builder:
    def __init__(self) -> None:
        self.numel: list[int] = []

    def add(self, n: int) -> int:
        self.numel.append(n)
        return len(self.numel) - 1

    def modules(self, mats: list[Matrix], fused: bool) -> list[tuple]:
        """Each module's parameter ids, new parameters, in the order listed."""
        out: list[tuple] = []
        for m in mats:
            if fused and m.expert and m.down_every:  # gate_up_proj and down_proj, one module
                down = m.size // m.down_every
                out.append((self.add(m.size - down), self.add(down)))
                continue
            out += [(self.add(m.rows * m.cols),) for _ in range(m.count)]
        return out


def step_trace(r: Resolved, stage: int) -> Trace:
    """The step's fetches on one GPU of `stage` (see the module's docstring)."""
    b = _Builder()
    fused = r.accounting.implementation == "huggingface"
    mats = rank_matrices(r, stage)
    layers = [b.modules(lay, fused) for lay in mats[:-1]]
    rest = mats[-1]
    n_emb = 0
    if stage == 0:
        n_emb = len(next(u for u in r.units if u.kind is UnitKind.EMBEDDING).matrices)
    emb = b.modules(rest[:n_emb], fused)
    head = b.modules(rest[n_emb:], fused)
    if emb and head and r.model.tied_embeddings and stage == r.execution.parallel.pipeline - 1:
        head.append(emb[0])  # the head's weight is the embedding's parameter
    hooked = LAYER_CONTAINERS if isinstance(r.model, Transformer) else 0
    recompute = r.execution.training.recompute == "full"
    steps: list[tuple[str, tuple[int, ...]]] = [("forward: embeddings", m) for m in emb]
    for i, mods in enumerate(layers):
        steps += [(f"forward: layer {i}", m) for m in [()] * hooked + mods]
    steps += [("forward: loss", m) for m in head]
    steps += [("backward: loss", m) for m in reversed(head)]
    for i in reversed(range(len(layers))):
        again = [()] * hooked + layers[i] if recompute else []
        steps += [(f"backward: layer {i}", m) for m in again + [()] * hooked + layers[i][::-1]]
    steps += [("backward: embeddings", m) for m in reversed(emb)]
    return Trace(tuple(b.numel), tuple(steps))
