"""8-bit AdamW on FSDP2's DTensors is torchao's AdamW8bit (state/torchao_adamw8bit.py): its
state decided on the rank's shard and its eager update's transients, by hand on the dense
model of tests/test_fsdp2_step.py, and the update's transients measured on plain CPU tensors
(torchao 0.18.0, the profiler's memory events). The whole step under FSDP2 is measured in
tests/test_fsdp2_step.py (EIGHT_BIT)."""

from __future__ import annotations

import pytest
from conftest import scenario
from test_fsdp2_step import cpu_events, matrix_raw

from tiersim.state.inventory import build_inventory
from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import resolve
from tiersim.state.torchao_adamw8bit import eager_step_bytes


def test_state_on_two_ranks_by_hand():
    """The dense model (hidden 64, MLP 128, vocabulary 512, 2 layers), fp32, 2 ranks; each
    tensor's shard is half its rows.
    A layer: q, k, v, o 64 x 64, shards of 2,048 values (< 4,096): both moments fp32, 2 x
    2,048 x 4 = 16,384 B each, 65,536 B; gate, up, down 64 x 128, shards of 4,096 (a multiple
    of 256): 8-bit, 2 x (4,096 codes + 16 scales x 4 B + a 1,024 B map) = 10,368 B each,
    31,104 B; two norms of 32 values, 2 x 32 x 4 = 256 B each, 512 B: 97,152 B, two layers
    194,304 B. The root: embedding and head 512 x 64, shards of 16,384: 2 x (16,384 + 64 x 4 +
    1,024) = 35,328 B each, the final norm 256 B: 70,912 B. In all 265,216 B.
    bitsandbytes' rules on the whole tensors, halved: (2 x (q, k, v, o: 4 x 8,320 B, MLP 3 x
    16,640 B, norms 2 x 512 B) + 2 x 66,560 B + 512 B) / 2 = 151,040 B."""
    r = resolve(scenario(matrix_raw("dense", "none", "fp32", "adamw8bit", 2)))
    assert build_inventory(r).per_gpu["optimizer"] == 265_216


def test_the_eager_update_peak_on_two_ranks_by_hand():
    """The largest shard is the embedding's (or the head's), 16,384 values, 8-bit: 53 B a
    value (p_f32, the two moments' fp32 copies, and in a moment's copy_ its scaled input, the
    int64 codes, codes_up, val_down, val_up, residual, a bool and torch.where's int64 result:
    4 x 3 + 4 + 8 + 8 + 4 + 4 + 4 + 1 + 8), 868,352 B, its 64 block scales 256 B and the two
    bias corrections 8 B: 868,616 B (bitsandbytes' CPU backend: 20 B a value, 327,680 B)."""
    events = cpu_events(matrix_raw("dense", "none", "fp32", "adamw8bit", 2))
    step = [e.nbytes for e in events if e.part == "optimizer step temporaries" and e.alloc]
    assert step == [868_616]


def test_bitsandbytes_rules_stay_without_dtensors():
    """The same model on one process (no FSDP2) keeps bitsandbytes' rules: 20 B a value of
    the largest tensor (the embedding's 32,768 values: 655,360 B) on the CPU."""
    assert optimizer("adamw8bit").step_temporary_bytes(0, 32_768, 4, "cpu") == 655_360


@pytest.mark.parametrize(
    ("dtype", "rows"),
    [("float32", 16), ("float32", 8), ("bfloat16", 32), ("bfloat16", 8)],
)
def test_eager_update_transients_measured_on_plain_tensors(dtype, rows):
    """torchao's eager update of one rows x 256 parameter (4,096 or 8,192 values: 8-bit;
    2,048: kept in the parameter's dtype), its second step recorded: its peak above what it
    started with equals eager_step_bytes."""
    torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
    if optimizer("adamw8bit").missing(dtensors=True):
        pytest.skip(optimizer("adamw8bit").missing(dtensors=True))
    from torch.profiler import ProfilerActivity, profile
    from torchao.optim import AdamW8bit

    p = torch.nn.Parameter(torch.randn(rows, 256, dtype=getattr(torch, dtype)))
    opt = AdamW8bit([p], lr=1e-3)
    p.grad = torch.randn_like(p)
    with torch.compiler.set_stance("force_eager"):
        opt.step()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            opt.step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    assert current == 0
    assert peak == eager_step_bytes(rows * 256, p.element_size())
