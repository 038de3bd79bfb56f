"""`tiersim calibrate --kernels-out`'s eager attention (tiersim/groundtruth/calibrate_eager.py):
the op set it times is attention (against PyTorch's own), its rates by hand with a timer that
says each call took 1 ns, a length that does not fit ends the walk with a note, and the
written table's `attention.eager` is what the workload reads."""

from __future__ import annotations

import pytest

from tiersim.groundtruth.calibrate_eager import eager_attention, eager_rates

torch = pytest.importorskip("torch")

T = 1e-9  # seconds a call, as the fake timer says


def one_ns(fn, repeats):
    fn()  # the operands are real: each call runs once
    return [T] * repeats


@pytest.mark.parametrize("causal", [False, True])
def test_the_timed_op_set_is_attention(causal):
    # flash-attention's attention_pytorch, re-written here, against PyTorch's SDPA (float32,
    # 2 sequences of 32 tokens, 4 heads of 16): the same output
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 32, 3, 4, 16, generator=gen)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (batch, heads, seq, d)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    got = eager_attention(torch, qkv, causal)  # (batch, seq, heads, d)
    assert torch.allclose(got.transpose(1, 2), want, atol=1e-5)


def test_the_rates_by_hand():
    notes: list[str] = []
    table = eager_rates(torch, "cpu", one_ns, 2, notes, (64, 128), (256, 16, 128))
    # 256 tokens a call: 4 sequences of 64, 16 heads of 128: full forward
    # 4 x 64^2 x 128 x 16 x 4 = 134,217,728 FLOPs in 1 ns = 134,217.7 TFLOP/s -> 134,200;
    # causal half, 67,108.9 -> 67,110; backward 2.5x: 335,544.3 -> 335,500 and 167,772.2
    # -> 167,800; 128 tokens: 2 sequences, 4 x 128^2 x 128 x 16 x 2 = 268,435,456: 268,400
    assert table["seq"] == [64, 128] and not notes
    assert table["forward"]["full"][128] == [134200, 268400]
    assert table["forward"]["causal"][128][0] == 67110
    assert table["backward"]["full"][128][0] == 335500
    assert table["backward"]["causal"][128][0] == 167800


def test_a_length_that_does_not_fit_ends_the_walk_with_a_note():
    calls = []

    def out_of_memory_past_64(fn, repeats):
        # 4 timings a length (causal and full, forward and backward): the 5th is 128's first
        calls.append(fn)
        if len(calls) > 4:
            raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return one_ns(fn, repeats)

    notes: list[str] = []
    seqs = (64, 128, 256)
    table = eager_rates(torch, "cpu", out_of_memory_past_64, 1, notes, seqs, (256, 16, 128))
    assert table["seq"] == [64]  # the lengths before it, the kernel's own
    assert len(table["forward"]["full"][128]) == 1
    assert notes == [
        "kernel table: attention eager not measured from 128 on: CUDA out of memory. "
        "Tried to allocate 8.00 GiB"
    ]


def test_none_fits_is_no_table():
    def out_of_memory(fn, repeats):
        raise RuntimeError("CUDA out of memory")

    notes: list[str] = []
    assert eager_rates(torch, "cpu", out_of_memory, 1, notes, (64,), (64, 16, 128)) == {}
    assert len(notes) == 1


def test_the_written_table_times_megatrons_eager_layer(tmp_path):
    # a measured `attention.eager` read back as `gpu.kernels` (its own `seq`): 1 ns a call
    import yaml

    from tiersim.hardware.kernel_tables import kernel_table

    notes: list[str] = []
    eager = eager_rates(torch, "cpu", one_ns, 1, notes, (64,), (64, 16, 128))
    raw = {"name": "cpu", "gemm": {"bf16": {"best": 1.0}}, "attention": {"eager": eager}}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(raw))
    mine = kernel_table(str(path))
    # full forward at 64 tokens: 4 x 64^2 x 128 x 16 = 33,554,432 in 1 ns: 33,550 TFLOP/s
    assert mine.attention_rate("eager", "forward", False, 128, 64) == pytest.approx(33550e12)
