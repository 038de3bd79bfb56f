"""A scenario resolved once into the model, the execution plan and the machine (what the engine
takes): each part is what the file says, with the defaults it leaves resolved."""

from __future__ import annotations

import dataclasses

import pytest
from engine_helpers import scenario, tiny

from tiersim.state.resolved import resolve


def test_the_parts_are_what_the_file_says():
    s = scenario(tiny(model={"layers": 1}, parallel={"data": 2}))
    res = resolve(s)
    assert res.name == "tiny"
    assert res.model.layers == 1 and res.model.parameters == 1_000_000_000
    assert res.machine.tiers["dram"].capacity == 10e12  # '10 TB', decimal
    assert res.execution.parallel.data == 2
    assert res.execution.seq_len == 1000  # training.seq_len as given
    # no checkpoint interval and no failure rate: no durable checkpoint simulated
    assert res.execution.checkpoint_simulated is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.name = "other"  # type: ignore[misc]


def test_defaults_the_file_leaves_are_resolved():
    raw = tiny()
    raw["model"] = {"preset": "gpt2"}  # 12 layers, max_positions 1024 (presets/models/gpt2.yaml)
    del raw["training"]["seq_len"]
    raw["training"]["framework"] = "fsdp"
    raw["checkpoint"] = {"every_steps": 10, "target": "nvme"}
    res = resolve(scenario(raw))
    assert res.model.layers == 12
    assert res.execution.seq_len == 1024  # the model's max_positions
    # FSDP offloads from pinned host memory (config/framework.py), tensor by tensor
    assert res.execution.offload.framework == "fsdp"
    assert res.execution.offload.pin_memory is True
    assert res.execution.offload.pinned_per_tensor is True
    assert res.execution.checkpoint_simulated is True  # an interval is given
