"""One GPU-hour price for different GPUs. `hardware.price_per_gpu_hour` is the scenario's one
price, so a cost plan whose space varies the machine (`plan: {hardware.preset: [dgx-h100,
dgx-b200]}`) and a compare of A against A with another `hardware.preset` price every machine's
GPU-hour alike: Llama 3 8B at 3 an hour ranked dgx-b200 cheapest per token (0.04341 against
dgx-h100's 0.07029) without a word that a B200 hour was priced as an H100's."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

PRICE = "hardware.price_per_gpu_hour"
WHERE_MACHINE = ("hardware.preset", "hardware.gpu")  # plan keys that change the GPU


def plan_price_note(s: Scenario) -> Problem | None:
    """For `plan --objective cost`: the plan varies the machine but not the price."""
    space = s.plan or {}
    varied = [k for k in space if k.startswith(WHERE_MACHINE)]
    if not varied or PRICE in space or s.hardware.price_per_gpu_hour is None:
        return None
    why = (
        f"{s.hardware.price_per_gpu_hour:g} an hour for every machine the plan searches "
        f"(it varies {', '.join(varied)}): the cost ranking prices their GPU-hours alike; to weigh "
        "machines at their own prices, plan one machine at a time with --set hardware.preset=... "
        f"--set {PRICE}=..."
    )
    return Problem(PRICE, why, "W-ONE-PRICE")


def compare_price_note(a: Scenario, b: Scenario) -> Problem | None:
    """For `compare`: A and B on different GPUs at the same price a GPU-hour."""
    pa, pb = a.hardware.price_per_gpu_hour, b.hardware.price_per_gpu_hour
    ga, gb = a.hardware.gpu.name, b.hardware.gpu.name
    if pa is None or pa != pb or ga == gb:
        return None
    why = (
        f"{pa:g} an hour for both sides' GPUs ({ga}, {gb}): the cost compares them at one "
        f"GPU-hour price; give B its own with --set {PRICE}=..."
    )
    return Problem(PRICE, why, "W-ONE-PRICE")
