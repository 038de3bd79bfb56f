"""Resources and operations are typed: a misspelt one is an error, not a resource of its own."""

from __future__ import annotations

import pytest

from tiersim.engine.ops import Op, OpKind, Role
from tiersim.hardware.resources import LinkDirection, NetChannel, Network, Port, TierPort


def test_a_misspelt_resource_is_an_error():
    with pytest.raises(TypeError, match="'raed' is not a Port"):
        TierPort("hbm", "raed")
    with pytest.raises(TypeError, match="'nvlnk' is not a NetChannel"):
        Network("nvlnk")
    with pytest.raises(AttributeError):
        OpKind.MOEV  # noqa: B018


def test_resources_are_values_with_their_channel():
    assert TierPort("hbm", Port.READ) == TierPort("hbm", Port.READ)
    assert TierPort("hbm", Port.READ) != TierPort("hbm", Port.WRITE)
    hop = LinkDirection("pcie", "hbm", "dram")
    assert (hop.channel, hop.direction) == ("pcie", "hbm->dram")
    assert Network(NetChannel.NVLINK).channel == "nvlink"
    assert TierPort("dram", Port.WRITE).channel is None
    # ties between flows resolve by this order: links, network channels, read, write ports
    ordered = sorted([TierPort("a", Port.WRITE), TierPort("a", Port.READ), hop])
    assert ordered == [hop, TierPort("a", Port.READ), TierPort("a", Port.WRITE)]


def test_an_op_says_what_it_is_for_in_words():
    move = Op(OpKind.MOVE, Role.STATE, "fetch", 0, [], subject="weights")
    comm = Op(OpKind.SYNC, Role.COLLECTIVE, "tp", 0, [], subject="tensor")
    bubble = Op(OpKind.IDLE, Role.BUBBLE, "wait", 0, [])
    assert [move.category, comm.category, bubble.category] == ["weights", "tensor_comm", "bubble"]
    assert OpKind.SYNC.stream == OpKind.IDLE.stream == "gpu" and OpKind.MOVE.stream is None
    assert OpKind.SYNC.network and not OpKind.MOVE.network
