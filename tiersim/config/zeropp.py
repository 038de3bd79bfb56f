"""DeepSpeed ZeRO++ (Wang et al. 2023, arXiv 2306.10209): which of its three parts a run has in
force, read from `training.deepspeed` (docs/zero-plus-plus.md).

- hpZ, `zero_hpz_partition_size` h: each GPU also keeps a secondary partition of the 16-bit
  weights over h consecutive ranks, and every gather but the first forward's after an update
  runs within those h (state/zeropp.py, workload/zeropp.py).
- qwZ, `zero_quantized_weights`: the weights' all-gathers send int8 blocks and fp32 scales.
- qgZ, `zero_quantized_gradients`: the gradients' reduce-scatter runs as int4 all-to-alls,
  within each node and then across the nodes.

In force only where DeepSpeed runs them as modelled: `training.framework: deepspeed` at
`parallel.zero_stage: 3` (engine.py `_configure_zero_optimizer` hands the three to stage 3's
optimizer alone; stage 1/2's DeepSpeedZeroOptimizer takes none of them: deepspeedai/DeepSpeed
engine.py at 007cca6a), and with the data-parallel group the whole world: DeepSpeed builds the
hpZ group from world ranks (deepspeed/utils/groups.py `_create_zero_param_parallel_group`:
`ranks = range(i * size, (i + 1) * size)` of `dist.get_world_size()`, "TODO: assert that MPU
is not set") and qgZ's all-to-all groups from the world and the node's device count
(groups.py `_get_local_all_to_all_group`; comm/coalesced_collectives.py
`all_to_all_quant_reduce`), which are the data-parallel ranks only without tensor, pipeline,
context or expert parallelism. Elsewhere a setting is said to have no effect (a W- note) and
the run is counted without it.
"""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.core.errors import Problem

WHERE = "training.deepspeed"
KEYS = ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients")


def given_settings(deepspeed) -> dict[str, object]:
    """The ZeRO++ settings away from their defaults."""
    out = {}
    if deepspeed.zero_hpz_partition_size > 1:  # 0 and 1 are off alike (DeepSpeed's ge=0)
        out["zero_hpz_partition_size"] = deepspeed.zero_hpz_partition_size
    for key in KEYS[1:]:
        if getattr(deepspeed, key):
            out[key] = True
    return out


def data_is_world(parallel) -> bool:
    """The data-parallel group is every rank: no tensor, pipeline, context or expert
    parallelism and no HSDP split (the groups DeepSpeed builds ZeRO++'s from world ranks)."""
    try:
        mesh = Mesh.of(parallel)
    except ValueError:  # a layout mesh_problems refuses: nothing of ZeRO++'s to say of it
        return False
    return mesh.world == mesh.data == mesh.shard and parallel.expert == 1


def in_force(training, parallel) -> bool:
    return (
        training.framework == "deepspeed" and parallel.zero_stage == 3 and data_is_world(parallel)
    )


def hpz_ranks(training, parallel) -> int:
    """Ranks of the hpZ secondary partition group: min(h, world) (groups.py: `min(group_size,
    world_size)`); 1 where hpZ is off or not in force."""
    h = training.deepspeed.zero_hpz_partition_size
    if h <= 1 or not in_force(training, parallel):
        return 1
    return min(h, Mesh.of(parallel).world)


def quantized_weights(training, parallel) -> bool:
    return training.deepspeed.zero_quantized_weights and in_force(training, parallel)


def qgz_nodes(training, parallel, gpus_per_node: int) -> int:
    """Nodes qgZ's all-to-alls span (its `num_nodes = world // device_count`); 0 where it does
    not run: off, not in force, or one node, where stage3.py `__avg_scatter_grads` falls back to
    `reduce_scatter_coalesced` (`if self.all2all_process_group is not None and num_nodes > 1`)."""
    if not training.deepspeed.zero_quantized_gradients or not in_force(training, parallel):
        return 0
    world = Mesh.of(parallel).world
    nodes = world // gpus_per_node
    return nodes if nodes > 1 and world % gpus_per_node == 0 else 0


def zeropp_notes(s) -> list[Problem]:
    """W-NO-EFFECT where a ZeRO++ setting is given and DeepSpeed does not run it as modelled
    (module docstring); under another framework the whole section's note says so
    (config/deepspeed_notes.py)."""
    tr, par = s.training, s.parallel
    given = given_settings(tr.deepspeed)
    if not given or tr.framework != "deepspeed":
        return []
    if par.zero_stage != 3:
        why = (
            f"parallel.zero_stage is {par.zero_stage}: DeepSpeed hands ZeRO++ to its ZeRO-3 "
            "optimizer alone (engine.py _configure_zero_optimizer; expected parallel."
            "zero_stage: 3)"
        )
    elif not data_is_world(par):
        why = (
            "the data-parallel group is not every GPU: DeepSpeed builds ZeRO++'s groups from "
            "world ranks (utils/groups.py), which are data-parallel ranks only without tensor, "
            "pipeline, context or expert parallelism; not modelled beside them, counted without"
        )
    elif "zero_quantized_gradients" in given and not qgz_nodes(
        tr, par, s.hardware.network.gpus_per_node
    ):
        why = (
            "the data-parallel GPUs are not two or more whole nodes: DeepSpeed's qgZ runs its "
            "all-to-alls only across num_nodes > 1 (stage3.py __avg_scatter_grads), else the "
            "plain reduce-scatter (counted so)"
        )
        return [Problem(f"{WHERE}.zero_quantized_gradients", f"true has no effect: {why}",
                        "W-NO-EFFECT")]  # fmt: skip
    else:
        return []
    return [
        Problem(f"{WHERE}.{key}", f"{_shown(value)} has no effect: {why}", "W-NO-EFFECT")
        for key, value in given.items()
    ]


def _shown(value: object) -> str:
    return "true" if value is True else f"{value}"


def zeropp_problems(s) -> list[Problem]:
    """What DeepSpeed refuses of ZeRO++ when it builds the engine (exit 2): an hpZ group size
    that does not divide the world (groups.py `_ensure_divisibility(world_size,
    zero_param_parallel_size_)`), qgZ with `reduce_scatter: false` (stage3.py `__init__`: "when
    enable all_to_all_reduce, reduce_scatter should also be enabled")."""
    tr, par = s.training, s.parallel
    out: list[Problem] = []
    if not given_settings(tr.deepspeed):
        return out
    if (
        tr.deepspeed.zero_quantized_gradients
        and not tr.deepspeed.reduce_scatter
        and in_force(tr, par)
    ):
        why = (
            "is false beside zero_quantized_gradients: true, which DeepSpeed refuses (stage3.py "
            "asserts 'when enable all_to_all_reduce, reduce_scatter should also be enabled'); "
            "expected reduce_scatter: true or zero_quantized_gradients: false"
        )
        out.append(Problem(f"{WHERE}.reduce_scatter", why, "E-CONFLICT"))
    h = hpz_ranks(tr, par)  # above 1 only on a valid mesh (in_force)
    world = Mesh.of(par).world if h > 1 else 1
    out += _secondary_home_problems(s, h)
    if world % h == 0:
        return out
    why = (
        f"is {tr.deepspeed.zero_hpz_partition_size}, which does not divide the {world} "
        "data-parallel GPUs (DeepSpeed asserts it: utils/groups.py _ensure_divisibility in "
        "_create_zero_param_parallel_group); expected a divisor of the data-parallel size"
    )
    return [*out, Problem(f"{WHERE}.zero_hpz_partition_size", why, "E-CONFLICT")]


def _secondary_home_problems(s, h: int) -> list[Problem]:
    """hpZ with the weights homed on a tier that is neither GPU memory nor host memory: under
    `offload_param` device nvme DeepSpeed allocates the secondary partition with
    `torch.empty(..., device=self.remote_device)`, `OffloadDeviceEnum.nvme`, which torch
    refuses ("Expected one of cpu, cuda, ... device type at start of device string: nvme"):
    partition_parameters.py `_partition_param_sec`, 57073d13, at the engine's first
    `_partition`, before any step."""
    home, hw = s.placement.weights, s.hardware
    if h <= 1 or home in (hw.gpu.memory, hw.cpu.memory):
        return []
    why = (
        f"is {home} beside training.deepspeed.zero_hpz_partition_size: {h}: DeepSpeed "
        "allocates hpZ's secondary weight partition on offload_param's device, and "
        "torch.empty(device='nvme') fails (partition_parameters.py _partition_param_sec); "
        f"expected placement.weights: {hw.gpu.memory} or {hw.cpu.memory} with hpZ, or "
        "zero_hpz_partition_size: 1"
    )
    return [Problem("placement.weights", why, "E-CONFLICT")]
