"""Storage figures on a directory: sequential writes in blocks then fsync (write bandwidth),
sequential reads (read bandwidth), 4 KiB random reads (read latency) and 4 KiB writes each
followed by fdatasync (write latency). O_DIRECT bypasses the page cache where the platform and
file system allow it; otherwise the I/O is buffered, written data is fsynced and the file's
cached pages are dropped (posix_fadvise DONTNEED) before reading, and the figures say so.
The temporary test file is removed whatever happens."""

from __future__ import annotations

import errno
import mmap
import os
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from tiersim.groundtruth.calibrate_settings import LATENCY_BLOCK, Settings
from tiersim.groundtruth.figure import Figure, timed


def _open(path: Path) -> tuple[int, bool]:
    """Open for read/write with O_DIRECT when allowed; (fd, direct)."""
    flags = os.O_RDWR | getattr(os, "O_BINARY", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct), True
        except OSError:
            pass  # e.g. tmpfs refuses O_DIRECT with EINVAL
    return os.open(path, flags), False


def _drop_cache(fd: int, direct: bool) -> None:
    if not direct and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class StorageProbe:
    """Sequential and 4 KiB random I/O on one temporary file; aligned buffers from mmap."""

    def __init__(self, fd: int, direct: bool, size: int, block: int):
        import numpy as np  # only for measuring: not at import

        self.fd, self.direct, self.size, self.block = fd, direct, size, block
        self.buf = mmap.mmap(-1, block)
        self.buf.write(np.random.default_rng(0).bytes(block))
        self.small = mmap.mmap(-1, LATENCY_BLOCK)
        self.rng = np.random.default_rng(1)

    def write_all(self) -> None:
        for off in range(0, self.size, self.block):
            os.pwrite(self.fd, self.buf, off)
        os.fsync(self.fd)
        _drop_cache(self.fd, self.direct)

    def read_all(self) -> None:
        _drop_cache(self.fd, self.direct)  # buffered I/O: read from the device, not the cache
        for off in range(0, self.size, self.block):
            os.preadv(self.fd, [self.buf], off)

    def _offsets(self, count: int) -> list[int]:
        blocks = self.size // LATENCY_BLOCK
        return [int(b) * LATENCY_BLOCK for b in self.rng.integers(0, blocks, count)]

    def read_latencies(self, count: int) -> list[float]:
        out = []
        for off in self._offsets(count):
            _drop_cache(self.fd, self.direct)
            start = time.perf_counter()
            os.preadv(self.fd, [self.small], off)
            out.append(time.perf_counter() - start)
        return out

    def write_latencies(self, count: int) -> list[float]:
        sync = getattr(os, "fdatasync", os.fsync)
        out = []
        for off in self._offsets(count):
            start = time.perf_counter()
            os.pwrite(self.fd, self.small, off)
            sync(self.fd)
            out.append(time.perf_counter() - start)
        return out


class StorageError(Exception):
    """The storage test cannot run in its directory: `option` is the setting to change."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def probe_file(folder: Path) -> Path:
    """Create the (empty) temporary test file in `folder`; the caller removes it."""
    try:
        handle, name = tempfile.mkstemp(prefix=".tiersim-calibrate-", dir=folder)
    except OSError as exc:
        why = f"cannot create a test file there: {_why(exc)}"
        raise StorageError("--path", f"{folder}: {why} (expected a writable folder)") from None
    os.close(handle)
    return Path(name)


def _failure(folder: Path, size: int, exc: OSError) -> StorageError:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        why = f"no room for the {size:,} B test file: {_why(exc)}"
        return StorageError("--size", f"{folder}: {why} (expected a smaller --size)")
    why = f"the storage test failed: {_why(exc)}"
    return StorageError("--path", f"{folder}: {why} (expected a folder on a writable file system)")


def storage_figures(s: Settings) -> tuple[list[Figure], str]:
    """Write, read and latency figures on `s.storage_dir`, and how the I/O was done. An I/O
    error is a StorageError; the test file is removed whatever happens."""
    block = min(2**20, s.storage_bytes // 16 // LATENCY_BLOCK * LATENCY_BLOCK)
    size = s.storage_bytes // block * block
    path = probe_file(s.storage_dir)
    try:
        return _storage_run(path, s, size, block)
    except OSError as exc:
        raise _failure(s.storage_dir, size, exc) from None
    finally:
        with suppress(OSError):
            path.unlink(missing_ok=True)


def _storage_run(path: Path, s: Settings, size: int, block: int) -> tuple[list[Figure], str]:
    fd, direct = _open(path)
    try:
        probe = StorageProbe(fd, direct, size, block)
        how = "O_DIRECT" if direct else "buffered I/O with fsync and page-cache drop (no O_DIRECT)"
        where = f"{size:,} B file in {s.storage_dir} in {block:,} B blocks, {how}"
        write = timed(probe.write_all, s.repeats)
        read = timed(probe.read_all, s.repeats)
        figures = [
            Figure(
                "storage write bandwidth",
                "B/s",
                tuple(size / t for t in write),
                f"sequential writes then fsync; {where}",
            ),
            Figure(
                "storage read bandwidth",
                "B/s",
                tuple(size / t for t in read),
                f"sequential reads; {where}",
            ),
            Figure(
                "storage read latency",
                "s",
                tuple(probe.read_latencies(s.latency_ops)),
                f"{LATENCY_BLOCK} B random reads; {how}",
            ),
            Figure(
                "storage write latency",
                "s",
                tuple(probe.write_latencies(s.latency_ops)),
                f"{LATENCY_BLOCK} B random writes, each then fdatasync; {how}",
            ),
        ]
    finally:
        os.close(fd)
    return figures, how
