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


def test_memory_profile_records_the_same_memory_events_and_the_ranges_only(capfd):
    """memory_profile observes the `record_function` ranges alone, not every operator: the
    same allocations and frees, in order, as the whole profile records (what measured_peaks
    reads), the ranges that name the phases, no operator's event; and no profiler line."""
    from torch.profiler import record_function

    from tiersim.groundtruth.quiet_profiler import memory_profile

    def work() -> None:
        with record_function("forward"):
            x = torch.ones(4096) * 2  # three 16 kB tensors (ones, x, y), each freed
            y = x + 1
            del x, y

    with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as whole:
        work()
    with memory_profile() as ranges:
        work()
    out, err = capfd.readouterr()
    assert "profiler_" not in out + err

    def events(prof) -> list:
        return list(prof.profiler.kineto_results.events())

    def memory(prof) -> list[int]:
        return [e.nbytes() for e in events(prof) if e.name() == "[memory]"]

    assert memory(ranges) == memory(whole)
    assert sorted(b for b in memory(ranges) if abs(b) == 16_384) == [-16_384] * 3 + [16_384] * 3
    names = {e.name() for e in events(ranges)}
    assert "forward" in names and "aten::mul" in {e.name() for e in events(whole)}
    assert not [n for n in names if n.startswith("aten::")]
