"""A ranked plan's GPU memory to spare at its simulated peak, and whether it is under the margin
for what the memory model does not count (review (k): qmoe-plan's first plan peaked at 84.68
GB of 84.94 GB, 0.26 GB to spare, 1.4 % faster than a plan with 14.6 GB to spare, and nothing
said the margin was thin).

"Fits" is decided on the caching allocator's modelled reserve (docs/memory.md, "The
allocator's view"); what the model does not count is listed there ("What it does not count")
and in docs/kernel-workspace.md. `MARGIN_BYTES` is the largest such term read from a source:
NCCL's NVLS buffers, which an early NCCL with NVLS on (`NCCL_NVLS_ENABLE` default 1, single-node
NVSwitch systems such as a DGX H100) allocates outside PyTorch's pool for each single-node
communicator of more than one rank: 16 channels x 2 x (4 MiB + 2 MiB) x 8 ranks =
1,610,612,736 B on 8 ranks (src/transport/nvls.cc `ncclNvlsSetup`, docs/kernel-workspace.md).
It also covers the other gaps on record: two multi-GPU readings put the memory outside
PyTorch's pool at 1.71 and 1.20 GiB where tiersim counts 1.08 GiB (0.63 GiB more at most), and
the first held 494.83 MiB reserved but unallocated (docs/nemo-memory.md, "The CUDA context").
The one figure serves every GPU (NVLS needs Hopper or later; an A100 node's terms left out are
the others above), so it marks a plan with less to spare than that, whatever its machine. A
plan under the margin is marked, not dropped or reordered: the model's peak is still its best
figure, and the margin says how much of it to trust.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes

MARGIN_BYTES = 16 * 2 * (4 * 2**20 + 2 * 2**20) * 8  # 1,610,612,736 B: NVLS's on 8 ranks
WHY = (
    "memory the model does not count (NCCL's NVLS buffers, 1.61 GB on an 8-GPU Hopper "
    "NVSwitch node; streams' cached blocks; fragmentation beyond the modelled reserve: "
    "docs/memory.md)"
)


def headroom(report: dict[str, Any]) -> dict[str, Any] | None:
    """The GPU tier's capacity less its simulated peak (bytes and share of the capacity), and
    whether that is under MARGIN_BYTES. None where the report has no GPU tier's timeline."""
    tier = (report.get("memory_timeline") or {}).get("tier")
    figures = report["tiers"].get(tier) if tier else None
    if figures is None:
        return None
    capacity, peak = figures["capacity_bytes"], figures["peak_bytes"]
    spare = capacity - peak
    return {
        "tier": tier,
        "bytes": spare,
        "share": spare / capacity if capacity else 0.0,
        "margin_bytes": MARGIN_BYTES,
        "under_margin": spare < MARGIN_BYTES,
    }


def headroom_line(room: dict[str, Any] | None) -> str | None:
    """'hbm 263.19 MB (0.3 %) to spare: THIN, under the 1.61 GB margin for memory ...'."""
    if room is None:
        return None
    text = f"{room['tier']} {fmt_bytes(room['bytes'])} ({100 * room['share']:.1f} %) to spare"
    if room["under_margin"]:
        text += f": THIN, under the {fmt_bytes(room['margin_bytes'])} margin for {WHY}"
    return text
