"""Every byte a step moves on the GPU's NVLink and network, in the measured step's links:
the engine's flows carry the collectives it times; the pipeline's point-to-point sends, the
part of each MoE all-to-all off its binding channel (or hidden behind computation) and the
tensor-parallel collectives hidden behind the backward are timed elsewhere
(tiersim.workload.link_bytes), so their bytes are added here. Busy and
in-flight time stay as measured: these bytes are priced in the stages' times, not as flows.
"""

from __future__ import annotations

from tiersim.core.frozen import replaced
from tiersim.engine.results import LinkStats, StepResult
from tiersim.state.resolved import Resolved
from tiersim.workload.link_bytes import expert_bytes, pipeline_bytes, tensor_hidden_bytes
from tiersim.workload.zeropp import zeropp_bytes


def with_link_totals(res: Resolved, stage: int, result: StepResult) -> StepResult:
    """`result` with the pipeline sends' and the hidden tensor-parallel collectives' bytes
    added to their channels and each channel's expert all-to-all bytes set to every call's in
    full."""
    added, expert = pipeline_bytes(res, stage), expert_bytes(res, stage)
    hidden = tensor_hidden_bytes(res, stage)  # and ZeRO++ qgZ's intra-node all-to-alls:
    for channel, groups in [*hidden.items(), *zeropp_bytes(res).items()]:
        per = added.setdefault(channel, {})
        for group, nbytes in groups.items():
            per[group] = per.get(group, 0) + nbytes
    if not added and not expert:
        return result
    links = dict(result.links)
    for channel in dict.fromkeys([*added, *expert]):
        per = dict(links[channel].bytes_by_direction) if channel in links else {}
        for group, nbytes in added.get(channel, {}).items():
            per[group] = per.get(group, 0) + nbytes
        if "expert" in expert.get(channel, {}):  # the flows' share of it replaced by the whole
            per["expert"] = expert[channel]["expert"]
        links[channel] = _with_bytes(links.get(channel), per)
    return replaced(result, links=links)


def _with_bytes(link: LinkStats | None, per: dict[str, int]) -> LinkStats:
    if link is None:  # a channel no flow crossed: bytes, no busy time
        return LinkStats(sum(per.values()), 0.0, 0.0, per)
    return replaced(link, bytes=sum(per.values()), bytes_by_direction=per)
