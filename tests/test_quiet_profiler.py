"""`tiersim measure` on the CPU records its step with torch.profiler, whose native library
(Kineto) writes `USDT:... profiler_start` / `profiler_stop` lines straight to the process's
stderr, past Python: the review saw them in the terminal between the measured figures. They
are kept out; any other native output of the same moment still reaches stderr."""

from __future__ import annotations

import os

import pytest
import yaml

from tiersim.cli import main

torch = pytest.importorskip("torch", reason="tiersim measure needs PyTorch (the `measure` extra)")

from torch.profiler import ProfilerActivity  # noqa: E402

from tiersim.groundtruth.quiet_profiler import quiet_profile  # noqa: E402

TINY = {  # a 2-layer Llama-style model, 64 wide: a measured step in a fraction of a second
    "family": "llama",
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 128,
    "max_positions": 32,
    "gated_mlp": True,
    "tied_embeddings": False,
    "norm": "rmsnorm",
    "position": "rope",
}


def test_measure_on_cpu_prints_no_profiler_lines(tmp_path, capfd):
    model = tmp_path / "tiny.yaml"
    model.write_text(yaml.safe_dump(TINY))
    capfd.readouterr()
    assert main(["measure", "--model", str(model), "--seq-len", "16", "--device", "cpu"]) == 0
    out, err = capfd.readouterr()  # the file descriptors' output, the native library's too
    assert "weights" in out
    assert "profiler_start" not in out + err and "profiler_stop" not in out + err
    assert "USDT:" not in out + err


def test_other_native_output_still_reaches_stderr_and_the_profile_records(capfd):
    with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.ones(4096) * 2  # 16 kB allocated: a memory event
        os.write(2, b"a native warning\n")
    out, err = capfd.readouterr()
    assert "a native warning\n" in err and "profiler_" not in out + err
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    assert events and float(x.sum()) == 8192.0
