"""A progress bar redrawn on a terminal leaves its line open; a refusal or error printed while
it is drawn starts on a line of its own, not after the bar."""

import contextlib
import io

from tiersim.cli import main
from tiersim.core.open_lines import end_open_lines
from tiersim.sweep.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn(stream: io.StringIO, done: int, total: int = 3) -> Progress:
    bar = Progress(total, stream)
    bar.last -= 20.0  # past the time between redraws (0.1 s a terminal, 10 s else): drawn
    bar.update(done)
    return bar


def test_refusal_after_an_open_bar_starts_a_line(tmp_path):
    terminal = FakeTerminal()
    with contextlib.redirect_stderr(terminal):
        _drawn(terminal, 1)  # 1 of 3: the line is redrawn in place, not ended
        code = main(["validate", str(tmp_path / "missing.yaml")])  # refused: no such file
    text = terminal.getvalue()
    assert code == 2
    bar_line, refusal = text.split("\n", 1)
    assert bar_line.startswith("\r[") and "1/3 points" in bar_line
    assert "missing" not in bar_line  # the message is not on the bar's line
    assert refusal.startswith(str(tmp_path)) and "missing.yaml: file not found" in refusal


def test_an_ended_bar_gets_no_extra_line():
    terminal = FakeTerminal()
    _drawn(terminal, 3)  # 3 of 3: the bar ends its own line
    end_open_lines()
    assert terminal.getvalue().count("\n") == 1


def test_open_line_ended_once():
    terminal = FakeTerminal()
    _drawn(terminal, 2)
    end_open_lines()
    end_open_lines()
    assert terminal.getvalue().endswith("\n")
    assert terminal.getvalue().count("\n") == 1


def test_a_file_never_needs_ending():
    log = io.StringIO()  # not a terminal: every line the bar writes is ended
    _drawn(log, 1)
    before = log.getvalue()
    end_open_lines()
    assert log.getvalue() == before and before.endswith("\n")
