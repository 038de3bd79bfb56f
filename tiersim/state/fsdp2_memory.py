"""FSDP2's buffers in the step's memory timeline (state/step_memory.py), as fully_shard makes
them (torch 2.13, torch/distributed/fsdp/_fully_shard/: _fsdp_collectives.py,
_fsdp_param_group.py), each a named part. G is one FSDP group's parameters unsharded (a layer,
or the root group: embeddings, final norm, head), padded to the shard group's W ranks, in the
compute precision; G_g its gradients as autograd makes them, in the same precision (R and S:
the same values in reduce_dtype and in the sharded parameters' dtype, below).

- all-gather: `foreach_all_gather` allocates the output buffer (G) and copies the rank's shard
  into it; `foreach_all_gather_copy_out` then allocates each parameter's unsharded tensor (G in
  all, one tensor each) and copies into them from the buffer. In forward the buffer is kept
  until the next group's copy-out (`comm_ctx.all_gather_state`, the implicit prefetch), so one
  group's buffer lives beside the next one's buffer and unsharded parameters; in backward the
  next group is prefetched after this one's copy-out (`backward_prefetch`) and its buffer
  freed at its own copy-out. The last layer's buffer lives through the loss's forward; the
  root's post-forward frees it, and where layers reshard after forward it is gathered again as
  the backward starts (step_memory.py, after the loss's forward).
- prefetch depth (`simulation.prefetch_depth`, resolved: 1 under FSDP2): 1 is FSDP2's defaults
  above; n > 1 the explicit prefetch FSDP2 offers for more (`set_modules_to_forward_prefetch`
  / `set_modules_to_backward_prefetch` with the next n layers, groundtruth/fsdp2_prefetch.py):
  after layer i's copy-out its forward all-gathers layers i + 1 .. i + n (`_pre_forward`), its
  backward layers i - 1 .. i - n (`_pre_backward`, default prefetch off), each buffer alive to
  that layer's own copy-out. So in a layer's backward its unsharded parameters live beside n
  all-gather buffers, in its forward beside its own kept buffer and n more.
- reduce-scatter (`foreach_reduce`, after the group's backward): autograd has made one
  gradient tensor per parameter (G_g); FSDP2 frees the unsharded parameters, allocates the
  reduce-scatter input (G_g), copies the gradients into it (`chunk_cat`) and frees them,
  allocates the output (G_g / W), reduces and adds it into the sharded `.grad` (kept all step
  here: `zero_grad(set_to_none=False)`), then frees it. The input is kept until the next
  group's reduce-scatter (`reduce_scatter_max_input_buffers`, 1) and the last one to the end of
  the backward.
- mixed precision (`MixedPrecisionPolicy`: the parameters sharded in `training.precision.
  weights`, gathered in the compute precision, reduced in `training.precision.gradients`):
  `_get_param_all_gather_inputs` first casts the rank's shards into one flat tensor in
  param_dtype (G / W), alive through the all-gather (`foreach_all_gather` returns with it);
  autograd's gradients come in param_dtype (G_g); the reduce-scatter input and output are
  in reduce_dtype (R, R / W); `foreach_reduce` then casts the output to the parameters'
  dtype (`_to_dtype_if_needed(reduce_output, orig_dtype)`: a new tensor, S / W, the reduced
  output freed as it is rebound) and adds that into the sharded `.grad`, which is in the
  parameters' dtype (state/sharding.py `held_gradient_precision`).
- W = 1: no all-gather buffer (the shard is copied into the unsharded tensors directly,
  `wait_for_unshard`); the reduce-scatter's input and output as above (a copy, no collective).
- the transport's own copies, on the CPU only: gloo's all-gather fills a flat output of its own
  (G) and copies it into FSDP2's buffer; its reduce-scatter clones the input (G_g), all-reduces
  the clone and copies out the rank's chunk (ProcessGroupGloo.cpp: `_allgather_base`,
  `reduce_scatter_tensor_coalesced`). NCCL writes FSDP2's buffers in place: a GPU prediction
  counts no transport copy (its own buffers are NCCL_BUFFSIZE channels, outside the allocator).

Measured on 1, 2 and 4 gloo CPU ranks (tests/test_fsdp2_step.py; the allocation timeline in
groundtruth/fsdp2_step.py).
"""

from __future__ import annotations

import math

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.records import record
from tiersim.state.inventory import rank_matrices
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import fsdp2_padded_values
from tiersim.state.timeline import Steps

GATHERED = "gathered weights"
ALL_GATHER = "all-gather buffer (FSDP2)"
TRANSPORT = "collective transport copy (gloo, CPU only)"
GRADS = "unsharded gradients (before reduce-scatter)"
RS_INPUT = "reduce-scatter input (FSDP2)"
RS_OUTPUT = "reduce-scatter output (FSDP2)"
AG_INPUT = "all-gather input cast to param_dtype (FSDP2)"
RS_CAST = "reduced shard cast to the parameters' dtype (FSDP2)"


@record
class Group:
    """One FSDP group on one rank: its unsharded bytes (padded) and tensors."""

    key: str  # "0", "1", ... a layer; "rest" the root group
    nbytes: int  # G: parameters unsharded, compute precision
    grad_nbytes: int  # G_g: gradients unsharded
    tensors: int
    values: int = 0  # the parameters unsharded, padded (0: bytes as grad_nbytes says)


def fsdp2_of(r: Resolved) -> Fsdp2:
    """FSDP2 over the shard group (data x context; HSDP: its shard group), with gloo's copies
    where the timeline is the CPU's; its mixed precision where the parameters' dtype is not
    the compute precision or the gradients' (torchao's FP8 all-gather,
    training.fp8.param_gather, casts in its own hooks: not this cast)."""
    world = Mesh.of(r.execution.parallel).dense_shard_ranks
    depth = r.execution.simulation.prefetch_depth or 1
    prec, fp8 = r.execution.training.precision, r.execution.training.fp8
    fp8_params = fp8 is not None and fp8.param_gather
    held, reduce = PRECISION_BYTES[prec.weights], PRECISION_BYTES[prec.gradients]
    cast = held != r.accounting.compute_bytes and not fp8_params
    # an explicit `reshard_after_forward=True` on the root (Accelerate passes the plugin's to
    # every fully_shard call) keeps its post_forward_mesh_info: _lazy_init clears it only where
    # the argument was left out (torch 2.13 _fully_shard.py 246, _fsdp_state.py 203-207)
    root = r.execution.parallel.reshard_after_forward is True
    args = (world, r.accounting.device == "cpu", depth, reduce, held, cast, root)
    if r.execution.offload.fetch == "model":  # FSDP2's one unit (config/framework.py)
        return WholeModel(*args, last=str(len(rank_matrices(r, 0)) - 2))
    return Fsdp2(*args)


def padded_group_values(r: Resolved, unit: str, values: int) -> int:
    """A group's parameters unsharded as FSDP2 holds them: each padded to ceil(d0 / W) x W
    rows (state/fsdp.py) where that rule applies (dense models: state/fsdp.py's shapes have no
    experts, as the inventory's padding), else `values` (a MoE layer's own: its router,
    transformers' fused experts, the shared expert and its gate). The root group, where it is
    the one unit (`training.offload.fetch: model`), holds every parameter."""
    x, world = r.execution, Mesh.of(r.execution.parallel).dense_shard_ranks
    if unit == "rest" and x.offload.fetch == "model":  # one stage (config/framework.py)
        unit, values = "model", sum(m.size for u in rank_matrices(r, 0) for m in u)
    if r.model.is_moe_model:
        return values
    padded = fsdp2_padded_values(x.training, x.parallel, r.model, unit)
    return values if padded is None else padded * world


@record
class Fsdp2:
    world: int  # ranks the groups are sharded over
    gloo: bool  # the CPU's transport, with its own copies
    depth: int = 1  # layers prefetched ahead: 1 FSDP2's defaults, n > 1 its explicit prefetch
    reduce_bytes: int = 0  # reduce_dtype's bytes a value (0: the gradients' own, grad_nbytes)
    held_bytes: int = 0  # the sharded parameters' (orig_dtype's): the reduced shard cast to it
    cast_gather: bool = False  # param_dtype is not the sharded parameters' dtype
    root_reshards: bool = False  # the root group freed after the forward (`root_reshard`)

    def _reduced(self, g: Group) -> int:
        """R: the group's reduce-scatter input, in reduce_dtype."""
        return g.values * self.reduce_bytes if self.reduce_bytes and g.values else g.grad_nbytes

    def _transport(self, steps: Steps, at: str, phase: str, nbytes: int) -> None:
        if self.gloo and self.world > 1:
            steps.alloc(at, phase, "transport", TRANSPORT, nbytes)
            steps.free(at, phase, "transport", TRANSPORT)

    def all_gather(self, steps: Steps, at: str, phase: str, g: Group) -> None:
        """The group's all-gather into its buffer (none at W = 1)."""
        if self.world > 1 and f"all-gather {g.key}" not in steps.held:
            cast = math.ceil(g.nbytes / self.world) if self.cast_gather else 0
            steps.alloc(at, phase, "all-gather input", AG_INPUT, cast)
            steps.alloc(at, phase, f"all-gather {g.key}", ALL_GATHER, g.nbytes)
            self._transport(steps, at, phase, g.nbytes)
            steps.free(at, phase, "all-gather input", AG_INPUT)

    def unshard(self, steps: Steps, at: str, phase: str, g: Group) -> None:
        """All-gather (unless prefetched) and copy out into the unsharded parameters (the
        buffer is freed by `release`)."""
        if f"gathered {g.key}" not in steps.held:
            self.all_gather(steps, at, phase, g)
            steps.alloc(at, phase, f"gathered {g.key}", GATHERED, g.nbytes, g.tensors)

    @staticmethod
    def release(steps: Steps, at: str, phase: str, key: str) -> None:
        steps.free(at, phase, f"all-gather {key}", ALL_GATHER)

    def reduce_scatter(self, steps: Steps, at: str, phase: str, g: Group, grads: list) -> None:
        """After the group's backward: reshard, then the reduce-scatter of its gradients
        (`grads`: the (key, part) allocations that hold them, freed at the copy-in)."""
        steps.free(at, phase, f"gathered {g.key}", GATHERED)
        for key in [k for k in steps.held if k.startswith("rs input ")]:
            steps.free(at, phase, key, RS_INPUT)  # the previous group's, kept until now
        reduced = self._reduced(g)
        steps.alloc(at, phase, f"rs input {g.key}", RS_INPUT, reduced)
        for key, part in grads:
            steps.free(at, phase, key, part)
        steps.alloc(at, phase, "rs output", RS_OUTPUT, math.ceil(reduced / self.world))
        self._transport(steps, at, phase, reduced)
        if self.held_bytes and self.held_bytes != self.reduce_bytes and g.values:
            cast = math.ceil(g.values * self.held_bytes / self.world)
            steps.alloc(at, phase, "rs cast", RS_CAST, cast)  # the output freed as rebound
        steps.free(at, phase, "rs output", RS_OUTPUT)
        steps.free(at, phase, "rs cast", RS_CAST)  # added into the sharded .grad

    def root_reshard(self, steps: Steps, root: Group) -> None:
        """The root group given `reshard_after_forward=True`: freed by the root's post-forward
        (beside the last layer's buffer), unsharded again by its pre-backward (its buffer freed
        at the copy-out, as every backward's), before the last layer's prefetch."""
        if self.root_reshards:
            steps.free("forward: loss", "forward", f"gathered {root.key}", GATHERED)
            self.unshard(steps, "backward: loss", "backward", root)
            Fsdp2.release(steps, "backward: loss", "backward", root.key)

    def _prefetch(self, steps: Steps, at: str, phase: str, groups) -> None:
        """The all-gathers of `groups` not unsharded already (FSDP2's `unshard`: a no-op for
        a group whose parameters are whole, or whose all-gather is pending)."""
        for g in groups:
            if f"gathered {g.key}" not in steps.held:
                self.all_gather(steps, at, phase, g)

    def forward_prefetch(self, steps: Steps, at: str, groups: tuple[Group, ...], i: int) -> None:
        """After layer i's copy-out, its explicit prefetch: layers i + 1 .. i + n (none at
        FSDP2's default, n = 1: the next layer's all-gather is issued by its own forward)."""
        if self.depth > 1:
            layers = len(groups) - 1  # the root group's is the last
            self._prefetch(steps, at, "forward", groups[i + 1 : min(i + 1 + self.depth, layers)])

    def pre_backward(self, steps: Steps, at: str, groups: tuple[Group, ...], i: int) -> None:
        """Layer i's copy-out (its buffer freed at once), then the all-gathers of layers
        i - 1 .. i - n, the nearest first."""
        self.unshard(steps, at, "backward", groups[i])
        self.release(steps, at, "backward", groups[i].key)
        self._prefetch(steps, at, "backward", groups[max(0, i - self.depth) : i][::-1])

    @staticmethod
    def first_gradient(steps: Steps, at: str, g: Group, nbytes: int) -> None:
        """The group's first gradient tensor, made while all it saved is live: its largest
        (the MLP's down projection, the first linear a Llama layer's backward reaches)."""
        steps.alloc(at, "backward", f"grad first {g.key}", GRADS, min(nbytes, g.grad_nbytes))

    def post_backward(self, steps: Steps, at: str, g: Group) -> None:
        """The rest of the group's gradients, made as its saved tensors were freed, then the
        reduce-scatter of them all."""
        self.rest_of_gradients(steps, at, g)
        grads = [(f"grad first {g.key}", GRADS), (f"grads {g.key}", GRADS)]
        self.reduce_scatter(steps, at, "backward", g, grads)

    @staticmethod
    def rest_of_gradients(steps: Steps, at: str, g: Group) -> None:
        rest = g.grad_nbytes - steps.held.get(f"grad first {g.key}", 0)
        steps.alloc(at, "backward", f"grads {g.key}", GRADS, rest, max(1, g.tensors - 1))

    def end_of_backward(self, steps: Steps, at: str) -> None:
        for key in [k for k in steps.held if k.startswith("rs input ")]:
            steps.free(at, "backward", key, RS_INPUT)


@record
class WholeModel(Fsdp2):
    """FSDP2's one unit over the whole model (`fully_shard` on the root alone: Accelerate's
    `fsdp_auto_wrap_policy: NO_WRAP`; `training.offload.fetch: model`). Its group is the root
    group holding every parameter: all-gathered once, as the forward starts, and kept unsharded
    to the end of the backward (torch 2.13 _fsdp_state.py `_lazy_init`: the root's
    `post_forward_mesh_info = None`, never resharded after forward, where `fully_shard` was
    called without `reshard_after_forward`; given True, as Accelerate gives it, freed after the
    forward and gathered again as the backward starts: `root_reshard`); its all-gather buffer kept
    to the root's post-forward (the implicit prefetch's `all_gather_state`, as a last layer's);
    each layer's gradients kept unsharded as autograd makes them, to one reduce-scatter of the
    whole model after the embeddings' backward (`_root_post_backward_final_callback`: the
    group's `post_backward`). The layers' groups stand for their bytes alone."""

    last: str = ""  # the last layer's key: its release, after the loss's forward, the buffer's

    def all_gather(self, steps: Steps, at: str, phase: str, g: Group) -> None:
        if g.key == "rest":
            super().all_gather(steps, at, phase, g)

    def unshard(self, steps: Steps, at: str, phase: str, g: Group) -> None:
        if g.key == "rest":
            super().unshard(steps, at, phase, g)

    def release(self, steps: Steps, at: str, phase: str, key: str) -> None:
        if key == self.last:  # the root's post-forward (step_memory.py `_after_the_forward`)
            super().release(steps, at, phase, "rest")

    def post_backward(self, steps: Steps, at: str, g: Group) -> None:
        self.rest_of_gradients(steps, at, g)  # kept to the whole model's reduce-scatter

    def reduce_scatter(self, steps: Steps, at: str, phase: str, g: Group, grads: list) -> None:
        layers = [(k, GRADS) for k in steps.held if k.startswith(("grad first ", "grads "))]
        super().reduce_scatter(steps, at, phase, g, [*layers, *grads])
