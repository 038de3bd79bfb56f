"""The link table's notes on the network: how many NICs one GPU's rings drive at once, and
what the MoE all-to-alls' network bytes take of each GPU's own NIC. DeepEP's internode
kernels send a GPU's rows over its own NIC (docs/moe.md), at NETWORK_SHARE of it, while the
network row's bandwidth is the group's, one NCCL ring a NIC: its busy counts the all-to-alls'
bytes at that rate and the rest of their time as latency (docs/link-bytes.md), so a NIC kept
busy most of the step read a few percent there (review 2026-12-07-g). And the note on the
bytes no flow carries (PRICED_NOTE: docs/link-bytes.md)."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes, fmt_rate, fmt_time
from tiersim.workload.experts import NETWORK_SHARE


def network_notes(network: dict[str, Any] | None, step_s: float) -> str:
    """ "" or the notes, each on a line of its own after a newline."""
    if not network:
        return ""
    out = "\n" + _rings_note(network) if network["nics_per_gpu"] > 1 else ""
    return out + _all_to_all_note(network, step_s)


def _rings_note(network: dict[str, Any]) -> str:
    nics, nic, bw = (
        network["nics_per_gpu"],
        network["nic_bandwidth"],
        network["bandwidth_per_direction"],
    )
    note = (
        f"network: a group with {nics} GPUs in each node drives {nics} NICs at once (one NCCL "
        f"ring each), so one GPU's ring bytes move at up to {nics} x {_bandwidth(nic)}"
    )
    if bw is not None and nic is not None and bw < nics * nic * (1 - 1e-9):
        note += f", capped at the NVLink's {fmt_rate(bw)}"
    return note


def _all_to_all_note(network: dict[str, Any], step_s: float) -> str:
    nbytes, nic = network["bytes_by_direction"].get("expert", 0), network["nic_bandwidth"]
    if not nbytes or nic is None or step_s <= 0:
        return ""
    alone = nbytes / (nic * NETWORK_SHARE)
    return (
        f"\nnetwork: the MoE all-to-alls' {fmt_bytes(nbytes)} cross each GPU's own NIC (DeepEP, "
        f"at {NETWORK_SHARE * 100:.0f} % of {fmt_rate(nic)}): {fmt_time(alone)} of it alone, "
        f"{alone / step_s * 100:.1f} % of the step (busy above counts them at the row's rate)"
    )


def _bandwidth(bw: float | None) -> str:
    return "unlimited" if bw is None else fmt_rate(bw)


PRICED_NOTE = (
    "bytes/step counts the sends between pipeline stages, every MoE all-to-all's bytes on "
    "each channel, ZeRO++ qgZ's all-to-alls within a node and the tensor-parallel "
    "collectives hidden behind computation (overlap_tensor_backward / _forward); busy counts "
    "them only where a flow carries them (their time is in each stage's chunks, the "
    "all-to-all's or the gradient reduction's flow, or the SM share of the pass they hide "
    "behind: docs/link-bytes.md)"
)


def priced_outside_flows(links: dict[str, Any]) -> bool:
    """Whether bytes no flow carries are on the links (workload.link_bytes): pipeline sends,
    an all-to-all's second channel, a link with bytes and no busy time (qgZ's NVLink alone),
    a tensor group's link sending more than its busy time carries at its bandwidth (the
    hidden tensor-parallel collectives: review o)."""
    expert = [n for n, v in links.items() if "expert" in v["bytes_by_direction"]]
    unflowed = [n for n, v in links.items() if v["bytes"] and not v["busy_s"]]
    piped = [n for n, v in links.items() if "pipeline" in v["bytes_by_direction"]]
    hidden = [n for n, v in links.items() if _beyond_busy(v)]
    return len(expert) > 1 or bool(unflowed or piped or hidden)


def _beyond_busy(link: dict[str, Any]) -> bool:
    """A tensor group's sends above what its busy time moves at the link's bandwidth."""
    if "tensor" not in link["bytes_by_direction"]:
        return False
    carried = link["busy_s"] * link.get("bandwidth_per_direction", 0)
    return link["bytes"] > carried * (1 + 1e-6)
