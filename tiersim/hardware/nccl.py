"""What share of a link's rate NCCL collectives achieve, by message size and link kind.

nccl-tests (`all_reduce_perf`) report a collective's bus bandwidth, busbw = algbw · 2(n-1)/n
for all-reduce and · (n-1)/n for all-gather and reduce-scatter, so that a ring's time is the
bytes this GPU sends over busbw. Measured busbw stays well below the link's rate for the
buffers of tensor parallelism (tens of MB) and approaches it only for GB buffers: protocol
overheads, synchronisation and the latency of each ring step. A hardware preset gives this as
`network.intra_node_efficiency` (NVLink) and `network.inter_node_efficiency` (the network):
one fraction, or a curve {buffer size: busbw / link rate} read log-linearly between points.

A curve is a measurement end to end: its time already holds the ring's per-step latency, so a
collective on a curve-timed link pays sent / (rate · fraction(size)) and no separate latency.
Below the curve's smallest buffer the time stays that of the smallest (latency-bound: the
fraction falls in proportion to the size), above its largest the last fraction holds. A
single fraction (no curve) scales the bandwidth term and keeps the latency per ring step.

The fraction is applied to whatever rate the link is given: a faster link is assumed to reach
the same share (stated, not measured, for any link but the one a curve was measured on).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

Efficiency = float | Mapping[float, float]


def fraction(efficiency: Efficiency, nbytes: float) -> float:
    """busbw / link rate for a collective over a buffer of `nbytes` (NCCL convention)."""
    if not isinstance(efficiency, Mapping):
        return float(efficiency)
    points = sorted(efficiency.items())
    if nbytes <= points[0][0]:
        return points[0][1] * max(nbytes, 1.0) / points[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if nbytes <= x1:
            w = math.log(nbytes / x0) / math.log(x1 / x0)
            return y0 + w * (y1 - y0)
    return points[-1][1]


def is_curve(efficiency: Efficiency) -> bool:
    """A measured curve holds the per-step latency in its times (see the module docstring)."""
    return isinstance(efficiency, Mapping)


def slowdown_s(sent: float, bandwidth: float, efficiency: Efficiency, buffer: float) -> float:
    """Time a collective takes beyond sent / bandwidth: sent / bandwidth · (1/fraction - 1).

    It scales with 1 / bandwidth, so more bandwidth never lengthens a collective and an
    unlimited link adds nothing."""
    if sent <= 0 or bandwidth == math.inf:
        return 0.0
    share = fraction(efficiency, buffer)
    if not share > 0:
        raise ValueError(f"collective efficiency(={share}) must be > 0")
    return sent / bandwidth * (1.0 / share - 1.0)
