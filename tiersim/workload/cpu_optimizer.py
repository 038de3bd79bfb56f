"""Time of a CPU optimizer update of one unit.

Generic (no framework, FSDP, Megatron): `max(parameters / cpu.optimizer_rate, bytes touched /
host memory bandwidth)`, the rate being a whole CPU path's as fitted (dgx-a100: DeepSpeed's
path on Ma and Wang 2025's runs).

DeepSpeed's path in parts (stage_1_and_2.py / stage3.py `step` with a CPU optimizer), so that
the kernel's own measurement (ZeRO-Offload Table 4) and a whole step's (Ma and Wang 2025) are
explained by one set of figures:
- the CPU-Adam kernel (csrc/adam/cpu_adam_impl.cpp): `parameters / cpu.adam_kernel_rate`,
  or the bytes it touches over host memory bandwidth where that binds;
- clipping: `unscale_and_clip_grads` scales the fp32 gradient partition in place on the host
  (read and write 4 B a parameter);
- the copy back: `bit16_partitions[...].copy_(fp32_partition)` is a blocking cross-device
  copy with a change of type, which PyTorch converts on the CPU (aten/src/ATen/native/cuda/
  Copy.cu: conversions of blocking copies are done on the CPU) before it crosses: read 4 B,
  write the weights' bytes on the host; the crossing itself is a move the schedule times;
- the fp32 gradient copy across PCIe is a move too (engine/schedule_offload.py);
- per parameter tensor of the rank's partition (`cpu.path_overhead_per_tensor`, seconds,
  fitted: docs/validation.md, "CPU optimizer"): at the accumulation boundary ZeRO-1/2's
  `reduce_ipg_grads` calls `copy_grads_in_partition` for each parameter in the partition,
  which with a CPU optimizer launches the gradient's norm (`set_norm_for_param_grad_in_gpu`),
  its overflow check (`_has_inf_or_nan`: `float(x.float().sum())`, a host sync per tensor)
  and its own fp32 copy to the host (`async_inplace_copy_grad_to_fp32_buffer_from_gpu`), and
  the step's
  `complete_grad_norm_calculation_for_cpu_offload` reads each tensor's norm with `.item()`
  (another sync per tensor); Python work and syncs on one thread, so not scaled by cores;
- what none of these explains as a rate (`cpu.path_overhead_rate`, optional, none shipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiersim.config.framework import OffloadPlan
from tiersim.config.schema import PRECISION_BYTES, Hardware
from tiersim.state.layers import Matrix

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

CLIP_BYTES = 8  # read and write the fp32 gradient
FP32 = 4


def host_bandwidth(machine: Hardware) -> float:
    return machine.cpu.memory_bandwidth or machine.tiers[machine.cpu.memory].read_bw


def kernel_rate(machine: Hardware) -> float:
    cpu = machine.cpu
    return cpu.adam_kernel_rate or cpu.optimizer_rate


def partition_tensors(
    r: Resolved, mats: Sequence[Matrix], whole_layer: bool, share: float
) -> float:
    """Parameter tensors of a unit in the rank's partition: its matrices' tensors, less those
    a fused q/k/v holds as one (Model.fused_qkv, whole layers), times the share of the unit's
    parameters the rank updates (a ZeRO partition holds whole tensors but one)."""
    n = sum(m.count for m in mats)
    as_three = getattr(r.model, "fused_qkv", False) and not r.model.qkv_as_one  # listed apart
    if whole_layer and as_three:
        n -= 2 * (2 if r.model.qkv_bias else 1)  # q, k, v weights (and biases) as one each
    return max(n, 0) * share


def cpu_update_s(
    r: Resolved, plan: OffloadPlan, params: float, touched: float, tensors: float = 0.0
) -> float:
    """Seconds one unit's update takes on the host (`touched`: bytes the kernel touches;
    `tensors`: parameter tensors in the rank's partition, for the per-tensor part)."""
    bw = host_bandwidth(r.machine)
    if not plan.cpu_path_in_parts:
        return max(params / r.machine.cpu.optimizer_rate, touched / bw)
    kernel = max(params / kernel_rate(r.machine), touched / bw)
    copy_back = FP32 + PRECISION_BYTES[r.execution.training.precision.weights]
    overhead = r.machine.cpu.path_overhead_rate
    rest = params / overhead if overhead else 0.0
    per_tensor = tensors * (r.machine.cpu.path_overhead_per_tensor or 0.0)
    return kernel + params * (CLIP_BYTES + copy_back) / bw + rest + per_tensor
