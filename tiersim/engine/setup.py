"""What one run is built on before its first step: the machine's topology, the workload, the
memory each tier holds before the step and the prefetch depth that fits.

`simulate.prepare` builds it; `runs` and `durable`, which `simulate` calls, read it. It lives
here, below all three, so that none of them imports the module that calls it.
"""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.hardware.topology import Topology
from tiersim.workload.work import Workload


@record
class RunSetup:
    topo: Topology
    wl: Workload
    baseline: dict[str, int]
    depth: int
