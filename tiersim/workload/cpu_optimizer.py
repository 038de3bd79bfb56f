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
- what none of these explains (`cpu.path_overhead_rate`, fitted: README, "CPU optimizer").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.framework import OffloadPlan
from tiersim.config.schema import PRECISION_BYTES, Hardware

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

CLIP_BYTES = 8  # read and write the fp32 gradient
FP32 = 4


def host_bandwidth(machine: Hardware) -> float:
    return machine.cpu.memory_bandwidth or machine.tiers[machine.cpu.memory].read_bw


def kernel_rate(machine: Hardware) -> float:
    cpu = machine.cpu
    return cpu.adam_kernel_rate or cpu.optimizer_rate


def cpu_update_s(r: Resolved, plan: OffloadPlan, params: float, touched: float) -> float:
    """Seconds one unit's update takes on the host (`touched`: bytes the kernel touches)."""
    bw = host_bandwidth(r.machine)
    if not plan.cpu_path_in_parts:
        return max(params / r.machine.cpu.optimizer_rate, touched / bw)
    kernel = max(params / kernel_rate(r.machine), touched / bw)
    copy_back = FP32 + PRECISION_BYTES[r.execution.training.precision.weights]
    overhead = r.machine.cpu.path_overhead_rate
    rest = params / overhead if overhead else 0.0
    return kernel + params * (CLIP_BYTES + copy_back) / bw + rest
