"""Write amplification and physical NAND of a flash tier (the model is in analysis/wear.py's
docstring: sequential overwrite 1; uniform random writes by the Lambert-W garbage-collection
model of the spare area)."""

from __future__ import annotations

import math

from tiersim.config.schema import Endurance

# --- write amplification -----------------------------------------------------------------------


def lambert_w0(x: float) -> float:
    """Principal branch of the Lambert W function, W0(x)·e^W0(x) = x, for x >= -1/e (Halley)."""
    if x < -1.0 / math.e - 1e-15:
        raise ValueError(f"x(={x!r}) must be >= -1/e for the principal branch")
    if x <= -1.0 / math.e:
        return -1.0
    if x < -0.25:  # series about the branch point
        p = math.sqrt(2.0 * (math.e * x + 1.0))
        w = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p**3
    else:
        w = math.log1p(x) if x < 3 else math.log(x) - math.log(math.log(x))
    for _ in range(100):
        ew = math.exp(w)
        f = w * ew - x
        step = f / (ew * (w + 1.0) - (w + 2.0) * f / (2.0 * w + 2.0))
        w -= step
        if abs(step) <= 1e-15 * (1.0 + abs(w)):
            break
    return w


def random_write_amplification(spare_area: float) -> float:
    """Uniform random writes, greedy GC, many pages per block (see the module docstring)."""
    if not spare_area > 0:
        raise ValueError(f"spare_area(={spare_area!r}) must be > 0")
    a = 1.0 + spare_area
    return a / (a + lambert_w0(-a * math.exp(-a)))


def write_amplification(endurance: Endurance) -> float:
    if endurance.write_amplification is not None:
        return endurance.write_amplification
    if endurance.write_pattern == "sequential":
        return 1.0
    if endurance.spare_area is None:
        raise ValueError("random writes need write_amplification or spare_area to derive it")
    return random_write_amplification(endurance.spare_area)


def physical_bytes(capacity_bytes: float, endurance: Endurance) -> float:
    return capacity_bytes * (1.0 + (endurance.spare_area or 0.0))
