"""How groups of ranks lie over nodes (hardware/collectives.py): checked against counting
every member of every group, and at sizes where counting them would not end."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from tiersim.hardware.collectives import group_placement


def counted(size: int, stride: int, g: int) -> tuple[int, int]:
    """Every member of every group (they repeat every lcm(size·stride, g) ranks), counted."""
    block = size * stride
    fewest, most = size, 1
    for base in range(0, math.lcm(block, g), block):
        for offset in range(stride):
            nodes = Counter((base + offset + k * stride) // g for k in range(size))
            fewest, most = min(fewest, min(nodes.values())), max(most, len(nodes))
    return fewest, most


@pytest.mark.parametrize("g", [1, 2, 3, 4, 6, 8, 16])
def test_placement_equals_counting_every_member(g):
    for size in range(1, 25):
        for stride in range(1, 20):
            assert group_placement(size, stride, g) == counted(size, stride, g), (size, stride, g)


def test_a_group_of_2_to_the_40_ranks_is_placed_at_once():
    # data-parallel 2^40 ranks, stride 1 (tensor 1), 8 a node: contiguous blocks of 8, so
    # every node holds 8 of a group and a group spans 2^40 / 8 = 2^37 nodes
    assert group_placement(2**40, 1, 8) == (8, 2**37)
    # stride 3 over 8 a node: nodes hold 2 or 3 members (8 / 3), the first holds 3 from rank 0
    # (0, 3, 6) and the ranks 9, 12, 15 then 18, 21: a node with 2 exists, so 2
    assert group_placement(2**40, 3, 8)[0] == 2
    assert group_placement(2**40, 8, 8) == (1, 2**40)  # a node apart: one a node
