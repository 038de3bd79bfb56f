"""`wear --break-even` and `plan --break-even` ran about 30 simulations (half a minute on this
project's loaded 2-core machine) without a word on standard error: now their count and the
time elapsed, redrawn on a terminal, a line every 10 s elsewhere."""

import io
import re

from tiersim.cli import counting
from tiersim.cli.counting import Counted, Stages


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def clocked(monkeypatch, times: list[float]) -> None:
    ticks = iter(times)
    monkeypatch.setattr(counting.time, "monotonic", lambda: next(ticks))


def test_a_terminal_sees_the_count_redrawn_and_its_line_ended(monkeypatch):
    # the start at 0 s, then three simulations ending at 1, 2 and 62 s, then the close at 63 s
    clocked(monkeypatch, [0.0, 1.0, 2.0, 62.0, 63.0])
    stream = Terminal()
    counted = Counted(lambda s: s * 2, "break-even", 30, stream)
    assert [counted(n) for n in (1, 2, 3)] == [2, 4, 6]  # the simulations' own results
    counted.close()
    assert stream.getvalue() == (
        "\rbreak-even: 1 simulation (about 30), elapsed 0:01"
        "\rbreak-even: 2 simulations (about 30), elapsed 0:02"
        "\rbreak-even: 3 simulations (about 30), elapsed 1:02"
        "\rbreak-even: 3 simulations (about 30), elapsed 1:03\n"
    )


def test_a_log_gets_a_line_every_10_s_and_nothing_to_end(monkeypatch):
    clocked(monkeypatch, [0.0, 4.0, 9.0, 12.0, 15.0])
    stream = io.StringIO()
    counted = Counted(None, "break-even", 30, stream).wrap(lambda s: s)
    for n in range(4):
        counted(n)
    counted.close()
    # only at 12 s, 10 s or more after the start
    assert stream.getvalue() == "break-even: 3 simulations (about 30), elapsed 0:12\n"


def test_calibrate_names_each_stage_on_a_terminal_and_clears_it(monkeypatch):
    # `tiersim calibrate` took 53 s on this machine with nothing on standard error
    from tiersim.cli.counting import Stages

    clocked(monkeypatch, [0.0, 1.0, 31.0])
    stream = Terminal()
    stages = Stages("calibrate", stream)
    stages("CPU AdamW rates")
    stages("storage on .")
    stages.close()
    first = "calibrate: CPU AdamW rates, elapsed 0:01"  # 40 characters
    second = "calibrate: storage on ., elapsed 0:31"  # 37: padded over the first's last 3
    assert stream.getvalue() == f"\r{first}\r{second}   \r{' ' * 37}\r"


def test_calibrate_tells_its_stages_in_order(tmp_path, monkeypatch):
    from tiersim.groundtruth import calibrate as measured
    from tiersim.groundtruth.calibrate_settings import Settings
    from tiersim.groundtruth.figure import Figure

    told: list[str] = []
    # each group's measurement replaced by nothing: what is tested is the stages' order
    monkeypatch.setattr(
        measured, "host_memory_bandwidth", lambda *a: Figure("m", "B/s", (1, 1, 1), "")
    )
    monkeypatch.setattr(measured, "optimizer_figures", lambda *a: [])
    monkeypatch.setattr(measured, "storage_figures", lambda s: ([], "O_DIRECT"))
    monkeypatch.setattr(measured, "torch_with_cuda", lambda notes: None)  # no GPU stage
    measured.calibrate(Settings(tmp_path), told.append)
    assert told == ["host memory bandwidth", "CPU AdamW rates", f"storage on {tmp_path}"]


def test_a_log_gets_no_stage_lines():
    from tiersim.cli.counting import Stages

    stream = io.StringIO()
    stages = Stages("calibrate", stream)
    stages("host memory bandwidth")
    stages.close()
    assert stream.getvalue() == ""


def test_measure_says_it_is_training_on_a_terminal(monkeypatch, capsys):
    # `tiersim measure --model gpt2 --set model.layers=2` took 39 s here, silent until its table
    import sys

    from tiersim.cli import main
    from tiersim.groundtruth import measure as measuring

    seen: list[str] = []

    def measure(req):  # what a terminal shows while PyTorch trains, then no measurement
        seen.append(sys.stderr.getvalue())
        raise KeyboardInterrupt

    monkeypatch.setattr(measuring, "measure", measure)
    monkeypatch.setattr(measuring, "import_torch", lambda: None)  # PyTorch's import: a stage
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["measure", "--model", "gpt2"]) == 130
    said = "measure: training the model in PyTorch (a warm-up step, then the measured one)"
    said += ", elapsed 0:00"
    assert seen == ["\rmeasure: importing PyTorch, elapsed 0:00\r" + said]
    assert f"\r{' ' * len(said)}\r" in sys.stderr.getvalue()  # cleared before the message


def test_a_log_gets_each_stage_started_and_finished_where_asked(monkeypatch):
    # `tiersim measure` of a 1-layer GPT-2 took 2 min 31 s with nothing on a log's standard
    # error (review 2026-12-07 (c)). Clock: the start at 0 s, PyTorch imported by 15.2 s, the
    # training done at 131 s: 15.2 - 0 = 15.2 s, 131 - 15.2 = 115.8 s, 131 s is 2:11
    clocked(monkeypatch, [0.0, 0.0, 15.2, 15.2, 15.2, 131.0, 131.0])
    stream = io.StringIO()
    stages = Stages("measure", stream, log=True)
    stages("importing PyTorch")
    stages("training")
    stages.finish()
    stages.close()
    assert stream.getvalue().splitlines() == [
        "measure: importing PyTorch: started, elapsed 0:00",
        "measure: importing PyTorch: finished in 15.2 s, elapsed 0:15",
        "measure: training: started, elapsed 0:15",
        "measure: training: finished in 115.8 s, elapsed 2:11",
    ]


def test_a_stage_cut_short_is_not_said_finished(monkeypatch):
    clocked(monkeypatch, [0.0, 3.0])
    stream = io.StringIO()
    stages = Stages("measure", stream, log=True)
    stages("training")
    stages.close()  # an error or ^C: its message follows, no "finished"
    assert stream.getvalue() == "measure: training: started, elapsed 0:03\n"


def test_measure_says_its_stages_on_a_log(monkeypatch, capsys):
    from tiersim.cli import main
    from tiersim.groundtruth import measure as measuring

    def measure(req):
        raise KeyboardInterrupt

    monkeypatch.setattr(measuring, "measure", measure)
    monkeypatch.setattr(measuring, "import_torch", lambda: None)
    assert main(["measure", "--model", "gpt2"]) == 130
    err = capsys.readouterr().err
    assert "measure: importing PyTorch: started, elapsed " in err
    assert "measure: importing PyTorch: finished in " in err
    training = "measure: training the model in PyTorch (a warm-up step, then the measured one)"
    assert f"{training}: started, elapsed " in err
    assert f"{training}: finished" not in err  # interrupted


def _ranks_cut_short(monkeypatch, ranks: str, *others: str) -> None:
    """PyTorch's import a stage that does nothing, and the ranks' run (`ranks`: module.function)
    an interrupt, as the user's ^C while ranks train; its module and `others` (which would
    import torch and transformers: seconds) not imported."""
    import sys
    import types

    from tiersim import groundtruth
    from tiersim.groundtruth import measure_hf

    def interrupted(*args):
        raise KeyboardInterrupt

    for name in (ranks, *others):
        module, function = name.split(".")
        fake = types.ModuleType(f"tiersim.groundtruth.{module}")
        setattr(fake, function, interrupted)
        monkeypatch.setitem(sys.modules, fake.__name__, fake)
        monkeypatch.setattr(groundtruth, module, fake, raising=False)
    monkeypatch.setattr(measure_hf, "import_torch", lambda: None)


def _stages_said(err: str) -> list[str]:
    """Standard error's lines without their times."""
    return [
        re.sub(r"in [0-9.]+ s", "in S s", line.split(", elapsed ")[0]) for line in err.splitlines()
    ]


def test_measure_fsdp_says_its_stages_on_a_log(monkeypatch, capsys):
    # `measure --fsdp N` said nothing while its gloo ranks trained (review 2026-12-07 (c));
    # the stages are said by the command's process, the ranks (its children) silent
    from tiersim.cli import main

    _ranks_cut_short(monkeypatch, "fsdp2.measure_fsdp")
    assert main(["measure", "--model", "gpt2", "--set", "model.layers=1", "--fsdp", "2"]) == 130
    training = "measure: training the model under FSDP2 on 2 CPU ranks (gloo processes; one step)"
    assert _stages_said(capsys.readouterr().err)[:4] == [
        "measure: importing PyTorch: started",
        "measure: importing PyTorch: finished in S s",
        f"{training}: started",  # and not finished: interrupted
        "",
    ]


def test_measure_fsdp_of_transformers_model_says_its_stages_on_a_log(monkeypatch, capsys):
    from tiersim.cli import main

    _ranks_cut_short(
        monkeypatch, "fsdp2_step.record_fsdp_steps", "step_timeline.predicted_timeline"
    )
    args = ["--model", "gpt2", "--set", "model.layers=1", "--implementation", "huggingface"]
    assert main(["measure", *args, "--fsdp", "3"]) == 130
    training = (
        "measure: training transformers' model under FSDP2 on 3 CPU ranks (gloo processes; a "
        "warm-up step, then the recorded one)"
    )
    assert _stages_said(capsys.readouterr().err)[:4] == [
        "measure: importing PyTorch and transformers: started",
        "measure: importing PyTorch and transformers: finished in S s",
        f"{training}: started",
        "",
    ]


def test_measure_fsdp_says_a_mistake_before_any_stage(capsys):
    from tiersim.cli import main

    # one rank is not sharding: refused before PyTorch is imported, with no stage said
    assert main(["measure", "--model", "gpt2", "--fsdp", "1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tiersim measure: --fsdp: 1 ranks (expected 2 to 16 processes on this host) [E-MEASURE]"
    ]
