"""`tiersim inventory --plot`: the step's memory timelines without simulating it, the GPU's
(allocated and reserved, allocation by allocation, against the capacity less what lies
outside the allocator) and, where the step uses host memory, the host's beside it: the panels
`tiersim run --plot` draws at its foot, for the "does it fit?" question alone. matplotlib is
imported only when the picture is drawn."""

from __future__ import annotations

import textwrap
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.report.plot_host import draw_host_timeline
from tiersim.report.plot_memory import draw_memory_timeline
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.inventory import Inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import Timeline

DPI = 100
WIDTH_IN = 13  # as run --plot's picture, so the two panels read alike


def inventory_memory_figure(scenario: Scenario, inv: Inventory, host: HostTimeline | None) -> Any:
    """The picture of the GPU's timeline as `tiersim inventory` prints it, and `host`'s."""
    return memory_figure(scenario.name, gpu_timeline(resolve(scenario), inv), host)


def memory_figure(name: str, memory: Timeline, host: HostTimeline | None) -> Any:
    """The picture: `memory` the GPU's timeline, `host` the host's (None: none drawn)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, 4.2), layout="constrained", dpi=DPI)
    verdict = "fits" if memory.fits and (host is None or host.timeline.fits) else "DOES NOT FIT"
    title = (
        f"{name}: memory over one training step, {verdict} (the inventory's timelines, not "
        "simulated: `tiersim run --plot` adds the step's time and each tier's occupancy)"
    )
    fig.suptitle(textwrap.fill(title, 140), fontsize=11)
    if host is None:
        draw_memory_timeline(fig.add_subplot(), memory)
        return fig
    left, right = fig.add_gridspec(1, 2)
    draw_memory_timeline(fig.add_subplot(left), memory)
    draw_host_timeline(fig.add_subplot(right), host)
    return fig
