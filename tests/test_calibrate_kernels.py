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


TOKENS = 256  # batch x sequence of the attention cases: 4 sequences of 64, 2 of 128
SDP_FLAGS = ("flash_sdp_enabled", "math_sdp_enabled", "mem_efficient_sdp_enabled")


def measured(notes):
    return kernel_table(
        torch, "cpu", one_ns, 3, "cpu", notes, grid=(16, 32), seqs=(64, 128), tokens=TOKENS
    )


@pytest.fixture(scope="module")
def notes_and_table():
    """The table measured once for the tests that read it, with its notes."""
    notes: list[str] = []
    return notes, measured(notes)


@pytest.fixture(scope="module")
def table(notes_and_table):
    return notes_and_table[1]


def test_the_table_by_hand(table):
    bf16 = table["gemm"]["bf16"]
    assert bf16["grid"] == [16, 32]
    # 2 m n k FLOPs in 1 ns, TFLOP/s to 4 significant figures: (16, 32, 16)
    # 2 * 16 * 32 * 16 / 1e-9 / 1e12 = 16.384 -> 16.38; (32, 32, 32) 65.536 -> 65.54
    assert bf16["tflops"][0][1][0] == 16.38
    assert bf16["tflops"][1][1][1] == 65.54
    assert bf16["best"] == max(v for p in bf16["tflops"] for r in p for v in r)
    # causal attention: 16 heads of 128, 256 // 64 = 4 sequences of 64 tokens:
    # 4 * 64^2 * 128 * 16 * 4 / 2 = 67,108,864 FLOPs in 1 ns: 67,108.9 -> 67,110 TFLOP/s;
    # backward 2.5x: 167,772.2 -> 167,800; full (no mask), twice the causal FLOPs: 134,217.7
    # -> 134,200 and 335,544.3 -> 335,500
    att = table["attention"]["flash2"]
    assert att["forward"]["causal"][128][0] == 67110
    assert att["backward"]["causal"][128][0] == 167800
    assert att["forward"]["full"][128][0] == 134200
    assert att["backward"]["full"][128][0] == 335500
    # 128 tokens: 2 sequences, 4 * 128^2 * 128 * 16 * 2 / 2 = 134,217,728 causal: 134,200
    assert att["forward"]["causal"][128][1] == 134200
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


def test_each_attention_kernel_runs_on_its_own_sdpa_backend_alone():
    # the timer records which SDPA backends PyTorch may pick while a kernel is timed: pinned,
    # FlashAttention-2's rates are its kernel's (unpinned, SDPA may run the math or the
    # memory-efficient kernel and the table would say flash2)
    seen = []

    def recording(fn, repeats):
        seen.append(tuple(getattr(torch.backends.cuda, f)() for f in SDP_FLAGS))
        return one_ns(fn, repeats)

    from tiersim.groundtruth.calibrate_kernels import attention_table

    notes: list[str] = []
    attention_table(torch, "cpu", recording, 1, notes, seqs=(64,), tokens=64)
    # flash2: forward and backward, causal and full, flash alone enabled
    assert seen[:4] == [(True, False, False)] * 4


def test_a_kernel_the_device_cannot_run_is_a_note_and_left_out(notes_and_table):
    notes, table = notes_and_table
    # PyTorch's CPU build has no cuDNN attention: SDPA pinned to it finds no backend
    assert "cudnn" not in table["attention"]
    assert any(n.startswith("kernel table: attention cudnn not measured") for n in notes)


def test_the_fp8_recipes_by_hand():
    from tiersim.groundtruth.calibrate_kernels import fp8_recipes

    # rowwise scaling's n^3 GEMM in 2 ns, n = 32: 2 * 32^3 / 2e-9 / 1e12 = 32.768 -> 32.77
    # TFLOP/s, over a tensorwise 65.5: 0.50031 -> 0.5 (tensorwise and delayed: the same GEMM, 1)
    notes: list[str] = []

    def two_ns(fn, repeats):
        fn()
        return [2 * T] * repeats

    got = fp8_recipes(torch, "cpu", two_ns, 3, 32, 65.5, notes)
    # MXFP8 (E8M0 scales a 32 elements) runs on Blackwell's tensor cores: PyTorch's CPU build
    # refuses the scales (a ValueError), which leaves it out with a note; where it runs, the
    # same 2 ns gives the same 0.5
    if "mxfp8" in got:
        assert got.pop("mxfp8") == 0.5
    else:
        assert [n.split(":")[1] for n in notes] == [" fp8 mxfp8 GEMM not measured"]
    assert got == {"tensorwise": 1.0, "delayed": 1.0, "rowwise": 0.5}


def test_mxfp8_scales_are_one_e8m0_a_32_elements_of_k():
    from tiersim.groundtruth.calibrate_kernels import fp8_scales

    # n = 64: 64 rows x 64 / 32 blocks = 128 scales an operand, flattened (cuBLAS's swizzled
    # layout); E8M0 1.0 is exponent 127 alone
    scale_a, scale_b = fp8_scales(torch, "cpu", 64, "mxfp8")
    assert scale_a.dtype == torch.float8_e8m0fnu and scale_a.shape == (128,)
    assert scale_b.shape == (128,) and bool((scale_a.float() == 1.0).all())
    rows, cols = fp8_scales(torch, "cpu", 64, "rowwise")
    assert (rows.shape, cols.shape) == ((64, 1), (1, 64))


def test_the_grouped_gemm_shares_by_hand():
    from tiersim.groundtruth.calibrate_kernels import GROUPS, grouped_gemm

    assert GROUPS == 8
    # 8 groups of 16 rows against a 32 x 32 weight each in 1 ns: 2 * 8 * 16 * 32 * 32 =
    # 262,144 FLOPs, 262.144 -> 262.1 TFLOP/s, over a dense 524.2: 0.5; 32 rows: 524.3 / 524.2 = 1.0
    got = grouped_gemm(torch, "cpu", one_ns, 3, 32, 524.2, rows=(16, 32))
    assert got == {"rows": [16, 32], "share": [0.5, 1.0]}


def test_the_grouped_gemm_shares_by_contraction_by_hand():
    from tiersim.groundtruth.calibrate_kernels import grouped_gemm_by_k

    # N 32, K each of the grid's two largest, 16 and 32, over the grid's (32, 32, K) rate:
    # K 16: 2 x 8 x 16 x 32 x 16 = 131,072 FLOPs in 1 ns, 131.1 TFLOP/s, and 262.1 at 32
    # rows, over the grid's 131.1: 1.0 and 262.1 / 131.1 = 1.99924 -> 1.999; K 32: 262.1 and
    # 524.3 over 524.2: 0.5 and 1.0
    bf16 = {"grid": [16, 32], "tflops": [[[0, 0], [0, 0]], [[0, 0], [131.1, 524.2]]]}
    got = grouped_gemm_by_k(torch, "cpu", one_ns, 3, bf16, rows=(16, 32))
    assert got == {"rows": [16, 32], "k": [16, 32], "share": [[1.0, 1.999], [0.5, 1.0]]}


def test_every_measured_section_reads_back_as_the_table_it_names(tmp_path, table):
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    mine = load_table(str(path))
    bf16 = table["gemm"]["bf16"]
    # a grid point is its own rate (m 16, n 32, k 16)
    assert mine.gemm_rate("bf16", 16, 32, 16, None) == pytest.approx(bf16["tflops"][0][1][0] * 1e12)
    # FP8 with BF16's shape at its own best (no k_scale: the full K), every recipe listed
    fp8 = table["gemm"]["fp8"]["best"]
    want = bf16["tflops"][1][1][1] * fp8 / bf16["best"] * 1e12
    assert mine.gemm_rate("fp8", 32, 32, 32, None, "tensorwise") == pytest.approx(want)
    assert set(mine.fp8_recipes) >= {"tensorwise", "delayed"}
    # the grouped share at a measured point, and full attention's backward at 128 tokens
    grouped = table["grouped_gemm"]
    rows, ks, share = grouped["rows"], grouped["k"], grouped["share"]
    assert mine.grouped_gemm_share(rows[2], ks[1]) == pytest.approx(share[1][2])
    assert mine.grouped_gemm_share(rows[2], ks[0]) == pytest.approx(share[0][2])
    full = table["attention"]["flash2"]["backward"]["full"][128][1]
    assert mine.attention_rate("flash2", "backward", False, 128, 128) == pytest.approx(full * 1e12)


def test_kernels_dry_run_needs_kernels_out(tmp_path, capsys):
    from problem_lines import said

    from tiersim.cli import main

    assert main(["calibrate", "--out", str(tmp_path / "x.yaml"), "--kernels-dry-run"]) == 2
    line = said(capsys.readouterr().err.strip(), "tiersim calibrate")
    assert (line.path, line.code) == ("--kernels-dry-run", "E-OPTION")
    assert "expected --kernels-out FILE.yaml" in line.message


def test_a_dry_run_writes_a_table_a_scenario_is_timed_from(tmp_path):
    # `tiersim calibrate --kernels-out k.yaml --kernels-dry-run`'s table, measured on this CPU
    # (real timings, tiny shapes), then a scenario on it: GPT-2's GEMMs run at the CPU's
    # rates (a few GFLOP/s, where the H100's table gives hundreds of TFLOP/s), so they take
    # over 10,000x as long as on the shipped table: the file, not the preset, timed them
    from argparse import Namespace

    from tiersim import api
    from tiersim.cli.commands.calibrate import write_kernel_table

    out = tmp_path / "k.yaml"
    write_kernel_table(Namespace(kernels_out=str(out), kernels_dry_run=True, repeat=2))
    text = out.read_text()
    assert text.startswith("# CPU dry run (not a GPU's rates): kernel table measured")
    data = yaml.safe_load(text)
    assert data["gemm"]["bf16"]["grid"] == [16, 32] and data["attention"]["seq"] == [64]
    assert "compute_capability" not in data  # a CUDA device's only
    gemm_s = {}
    for name, kernels in (("dry", str(out)), ("shipped", "h100-sxm")):
        raw = {
            "name": name,
            "model": {"preset": "gpt2"},
            "training": {"seq_len": 1024, "micro_batch_size": 1, "attention_kernel": "flash"},
            "hardware": {"preset": "dgx-h100", "gpu": {"kernels": kernels}},
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        gemm_s[name] = api.run(api.load(path)).report["step"]["breakdown"]["gemm_s"]
    assert gemm_s["dry"] > 1e4 * gemm_s["shipped"] > 0


def test_a_pytorch_that_cannot_pin_a_backend_measures_no_sdpa_attention(monkeypatch):
    # PyTorch before 2.3 has no torch.nn.attention.sdpa_kernel: unpinned rates would not be
    # the kernel's they are filed under, so none are written (eager attention, plain ops,
    # is: tests/test_calibrate_eager.py)
    import sys

    from tiersim.groundtruth.calibrate_kernels import attention_table

    monkeypatch.setitem(sys.modules, "torch.nn.attention", None)  # import fails
    notes: list[str] = []
    table = attention_table(torch, "cpu", one_ns, 1, notes, seqs=(64,), tokens=64)
    assert sorted(table) == ["eager", "seq"]
    assert notes and notes[0].startswith("kernel table: attention not measured")
