"""`wear --break-even` and `plan --break-even` ran about 30 simulations (half a minute on this
project's loaded 2-core machine) without a word on standard error: now their count and the
time elapsed, redrawn on a terminal, a line every 10 s elsewhere."""

import io

from tiersim.cli import counting
from tiersim.cli.counting import Counted


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
