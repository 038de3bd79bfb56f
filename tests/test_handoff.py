"""A local worker's outcome comes back in a message a kill cannot tear (tiersim.sweep.handoff):
every message on the pool's result pipe, the pool's own envelope included, fits in one pipe
write Linux never splits; a larger outcome comes back whole through a file, then removed."""

from __future__ import annotations

import os
import select
import struct
from concurrent.futures.process import _ResultItem  # what the pool pickles around an outcome
from multiprocessing.reduction import ForkingPickler

import pytest

from tiersim.sweep import handoff
from tiersim.sweep.execute import LocalPool, stream

PIPE_BUF = 4096  # Linux, pipe(7): "POSIX.1 requires PIPE_BUF to be at least 512 bytes. (On
# Linux, PIPE_BUF is 4096 bytes.)"; writes of at most this many bytes are atomic
PID_MAX = 4194304  # Linux's largest pid_max (2**22): the longest pid a file name can hold


def message_bytes(result: object) -> int:
    """What the pool writes for one finished call: a 4-byte length, then its pickled envelope
    (multiprocessing.connection.Connection._send_bytes, in one write below 16 kB)."""
    envelope = ForkingPickler.dumps(_ResultItem(2**63, result=result))
    return len(struct.pack("!i", len(envelope))) + len(envelope)


def test_the_largest_message_fits_in_one_unsplittable_pipe_write():
    assert select.PIPE_BUF == PIPE_BUF
    assert message_bytes(os.urandom(handoff.INLINE_BYTES)) <= PIPE_BUF
    name = f".{'f' * 32}.outcome.{PID_MAX}.tmp"  # uuid4().hex is 32 hex digits
    assert message_bytes(name) <= PIPE_BUF


def large_result(size: int) -> bytes:
    return bytes(range(256)) * (size // 256)


def large_error(size: int) -> bytes:
    raise ValueError("x" * size)


def small_result(size: int) -> tuple[int, str]:
    return size, "small"


def test_a_small_outcome_is_handed_back_inline_and_a_large_one_by_a_file(tmp_path):
    small = handoff.call(str(tmp_path), small_result, 7)
    assert isinstance(small, bytes) and len(small) <= handoff.INLINE_BYTES
    large = handoff.call(str(tmp_path), large_result, 1 << 20)
    assert isinstance(large, str) and [p.name for p in tmp_path.iterdir()] == [large]
    assert handoff.receive(str(tmp_path), small) == (7, "small")
    assert handoff.receive(str(tmp_path), large) == bytes(range(256)) * 4096
    assert list(tmp_path.iterdir()) == []  # the file is removed once read


def test_a_large_exception_is_raised_in_the_parent_whole(tmp_path):
    handed = handoff.call(str(tmp_path), large_error, 100_000)
    assert isinstance(handed, str)
    with pytest.raises(ValueError) as caught:
        handoff.receive(str(tmp_path), handed)
    assert str(caught.value) == "x" * 100_000
    assert list(tmp_path.iterdir()) == []


def unpicklable(_: object) -> object:
    return lambda: None


def test_an_outcome_that_cannot_be_pickled_comes_back_as_a_short_error(tmp_path):
    handed = handoff.call(str(tmp_path), unpicklable, None)
    assert isinstance(handed, bytes)
    with pytest.raises(RuntimeError, match="cannot hand the result back: "):
        handoff.receive(str(tmp_path), handed)


def test_a_real_pool_hands_back_large_results_and_errors_and_leaves_no_file(tmp_path):
    pool = LocalPool(2, tmp_path)
    try:
        sizes = [10, 200_000, 3 << 20, 50]
        outcomes = [item for batch in stream(pool, large_result, sizes) for item in batch]
        errors = [item for batch in stream(pool, large_error, [5, 300_000]) for item in batch]
    finally:
        pool.close()
    by_position = dict(outcomes)
    assert [len(by_position[i]) for i in range(4)] == [0, 199_936, 3 << 20, 0]  # 256-byte runs
    assert by_position[2] == bytes(range(256)) * (3 << 12)
    assert sorted(str(e) for _, e in errors) == sorted(["x" * 5, "x" * 300_000])
    assert all(isinstance(e, ValueError) for _, e in errors)
    assert list(tmp_path.iterdir()) == []


def test_a_pool_without_a_folder_removes_its_own_on_close():
    pool = LocalPool(1)
    folder = pool.folder
    try:
        ((_, result),) = next(stream(pool, large_result, [1 << 16]))
    finally:
        pool.close()
    assert result == bytes(range(256)) * 256
    assert not os.path.exists(folder)
