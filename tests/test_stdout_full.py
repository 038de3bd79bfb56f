"""Standard output that cannot be written (`tiersim run S > /dev/full`, a full disk) is said in
one line on standard error with exit 2, as an unwritable --out is, never a traceback."""

from __future__ import annotations

import errno
import io
import sys

from tiersim.cli import main


class Full(io.StringIO):
    """A stream on a full device: every write fails as the kernel says ENOSPC."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_standard_output_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", Full())
    code = main(["presets"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "standard output: cannot write there: No space left on device "
        "(expected room for the output) [E-RESULTS]"
    )


def test_another_os_error_is_not_taken_for_a_full_output(monkeypatch):
    """Only the errors of a full or failing device: anything else is no user's doing."""

    class Refused(Full):
        def write(self, text: str) -> int:
            raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(sys, "stdout", Refused())
    try:
        main(["presets"])
    except OSError as exc:
        assert exc.errno == errno.EBADF
    else:
        raise AssertionError("an EBADF was taken for a full device")
