"""A run of fewer GPUs than a node: each GPU is held to one GPU's share of host memory (the
presets divide a node's DRAM by its GPUs), and the text said "X of 512.00 GB a node" for 2 of
a DGX H100's 8 GPUs, whose node has 2.05 TB. The run's GPUs are named as such, the node's
size is in the report (`node.gpus_per_node`), and a note says what the run is held to."""

from __future__ import annotations

import json

from tiersim.report.plot_host import host_title
from tiersim.state.host_timeline import HostTimeline, evaluate_host
from tiersim.state.timeline import Event

GB = 10**9
# gpt2 with its Adam state in host memory, updated by the CPU: the step uses host memory
SCENARIO = """\
name: part
model: {preset: gpt2}
training: {micro_batch_size: 1, seq_len: 256}
parallel: {data: DATA}
placement: {optimizer: dram, optimizer_compute: cpu}
hardware: {preset: dgx-h100}
"""


def _inventory(cli, tmp_path, data: int) -> tuple[dict, str]:
    path = tmp_path / f"d{data}.yaml"
    path.write_text(SCENARIO.replace("DATA", str(data)))
    code, out, err = cli("inventory", path, "--format", "json")
    assert code == 0, err
    code, text, err = cli("inventory", path)
    assert code == 0, err
    return json.loads(out)["host_memory_timeline"], text


def test_two_of_eight_gpus_are_the_runs_not_a_node(cli, tmp_path):
    hm, text = _inventory(cli, tmp_path, 2)
    node = hm["node"]
    # dgx-h100: 8 GPUs a node, 256 GB of host DRAM a GPU (its 2 TB / 8)
    assert (node["gpus"], node["gpus_per_node"]) == (2, 8)
    assert hm["capacity_bytes"] == 256 * GB
    assert node["capacity_bytes"] == 2 * 256 * GB  # the run's two shares, as before
    assert "of 512.00 GB for the run's 2 GPUs (fits)" in text
    assert "of 512.00 GB a node" not in text
    # the node has 8 x 256 GB = 2.048 TB; alone on it, 2 GPUs could use 2,048 / 2 = 1,024 GB each
    assert (
        "the run uses 2 of the node's 8 GPUs: each is held to one GPU's share of host memory, "
        "256.00 GB (hardware.tiers.dram.capacity, the node's 2.05 TB / 8); alone on the node "
        "it could use up to 1.02 TB a GPU: set that capacity to say so"
    ) in text


def test_a_whole_node_is_said_as_before(cli, tmp_path):
    hm, text = _inventory(cli, tmp_path, 8)
    assert (hm["node"]["gpus"], hm["node"]["gpus_per_node"]) == (8, 8)
    assert "of 2.05 TB a node (fits)" in text  # 8 x 256 GB
    assert "the node (8 GPUs)" in text
    assert "of the node's" not in text


def test_the_plot_names_the_runs_gpus_not_a_node():
    events = [Event("start of the step", "start", "a", "resident optimizer", 2 * GB, True)]
    timeline = evaluate_host("dram", 256 * GB, events)
    part = HostTimeline(timeline, node_gpus=2, node_stages=1, node_size=8)
    assert "(dram, one GPU's share; \nthe run's 2 GPUs: 2 x this)" in host_title(part)
    whole = HostTimeline(timeline, node_gpus=8, node_stages=1, node_size=8)
    assert "(dram, one GPU's share; a node: 8 x this)" in host_title(whole)
