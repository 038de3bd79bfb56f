"""The parallel layout's headline writes a GPU count as every other count is shown, with
thousands separators (Llama 3 405B's 16,384 GPUs, not 16384)."""

from __future__ import annotations

from tiersim.config.mesh import Mesh


def test_the_world_size_has_thousands_separators():
    mesh = Mesh(tensor=8, context=16, data=8, pipeline=16, expert=1, expert_tensor=8, shard=8)
    # 8 x 16 x 8 x 16 = 16,384
    assert mesh.describe() == "tensor 8 x context 16 x data 8 x pipeline 16 = 16,384 GPUs"


def test_a_small_world_reads_as_before():
    mesh = Mesh(tensor=8, context=1, data=4, pipeline=1, expert=1, expert_tensor=8, shard=4)
    assert mesh.describe() == "tensor 8 x data 4 = 32 GPUs"
