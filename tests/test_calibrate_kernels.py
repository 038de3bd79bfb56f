"""`tiersim calibrate --kernels-out` (tiersim/groundtruth/calibrate_kernels.py): the measured
kernel table's form and arithmetic, with PyTorch on the CPU and a timer that says each call
took 1 ns (so the tiny shapes give rates of TFLOP/s); the written file is read back as
`gpu.kernels`."""

from __future__ import annotations

import pytest
import yaml
from conftest import scenario

from tiersim.groundtruth.calibrate_kernels import kernel_table
from tiersim.hardware.kernel_tables import kernel_table as load_table

torch = pytest.importorskip("torch")


T = 1e-9  # seconds a call, as the fake timer says


def one_ns(fn, repeats):
    fn()  # the operands are real: each call runs once
    return [T] * repeats


def measured(notes):
    return kernel_table(torch, "cpu", one_ns, 3, "cpu", notes, grid=(16, 32), seqs=(64, 128))


@pytest.fixture(scope="module")
def table():
    """The table measured once for the tests that read it (its attention runs 256 sequences of
    up to 128 tokens on the CPU: 4 s of CPU a table)."""
    return measured([])


def test_the_table_by_hand(table):
    bf16 = table["gemm"]["bf16"]
    assert bf16["grid"] == [16, 32]
    # 2 m n k FLOPs in 1 ns, TFLOP/s to 0.1: (16, 32, 16) 2 * 16 * 32 * 16 / 1e-9 / 1e12 =
    # 16.384 -> 16.4; (32, 32, 32) 65.536 -> 65.5
    assert bf16["tflops"][0][1][0] == 16.4
    assert bf16["tflops"][1][1][1] == 65.5
    assert bf16["best"] == max(v for p in bf16["tflops"] for r in p for v in r)
    # causal attention: 16 heads of 128, 16384 // 64 = 256 sequences of 64 tokens:
    # 4 * 64^2 * 128 * 16 * 256 / 2 FLOPs in 1 ns; backward 2.5x
    flop = 4 * 64**2 * 128 * 16 * 256 / 2
    att = table["attention"]["flash2"]
    assert att["forward"]["causal"][128][0] == round(flop / T / 1e12, 1)
    assert att["backward"]["causal"][128][0] == round(2.5 * flop / T / 1e12, 1)
    assert table["attention"]["seq"] == [64, 128]


def test_the_written_table_is_read_as_gpu_kernels(tmp_path, table):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    mine = load_table(str(path))
    assert mine.attention_rate("flash2", "forward", True, 128, 64) == pytest.approx(
        table["attention"]["flash2"]["forward"]["causal"][128][0] * 1e12
    )
    raw = {
        "name": "k",
        "model": {"preset": "gpt2"},
        "hardware": {"preset": "dgx-h100", "gpu": {"kernels": str(path)}},
    }
    assert scenario(raw).hardware.gpu.kernels == str(path)


def test_a_missing_table_file_is_refused(tmp_path):
    from tiersim.core.errors import InputError

    raw = {
        "name": "k",
        "model": {"preset": "gpt2"},
        "hardware": {"preset": "dgx-h100", "gpu": {"kernels": str(tmp_path / "none.yaml")}},
    }
    with pytest.raises(InputError, match=r"hardware.gpu.kernels: .*no such file"):
        scenario(raw)


def test_the_sustained_share_is_the_last_samples_rate_over_the_firsts():
    from tiersim.groundtruth.calibrate_kernels import WINDOW, sustained_share

    calls = []

    def throttling(fn, repeats):
        # 1 s of 10 ms samples: 100; the first 20 at 1.00 ms a call, the GPU's clock then
        # falling to 0.8 of it, the last 20 at 1.25 ms: 1.00 / 1.25 = 0.8 of the rate kept
        calls.append(repeats)
        return [1e-3] * WINDOW + [1.1e-3] * (repeats - 2 * WINDOW) + [1.25e-3] * WINDOW

    assert sustained_share(throttling, lambda: None, 1.0) == 0.8
    assert calls == [100]  # ceil(1.0 / 0.01) samples of at least 10 ms
    # a GPU that speeds up (a cold start) keeps its whole rate: at most 1
    assert sustained_share(lambda fn, n: [2e-3] * WINDOW + [1e-3] * (n - WINDOW), None, 1) == 1.0


def test_the_measured_table_carries_its_sustained_shares(table):
    # the module's table, measured with the 1 ns timer: no throttle, every share 1
    assert table["sustained"]["bf16"] == 1.0
