"""Process locks and atomic file installs.

A reader must only ever see the previous valid file or the complete new one, whatever happens to
the writer (exception, ``kill -9``, full disk): write a temp file beside the target, fsync it,
``os.replace`` it over the target, fsync the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import filelock

from feedline.io.errors import LockTimeout


def _holder_path(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".holder")


@contextlib.contextmanager
def process_lock(path: str | os.PathLike[str], timeout_s: float) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` across processes, waiting at most ``timeout_s``.

    The holder writes who it is next to the lock so that a waiter that gives up can say which
    process it waited for (the lock file itself must stay empty for filelock).
    """
    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_path))
    try:
        lock.acquire(timeout=timeout_s)
    except filelock.Timeout:
        holder = "unknown holder"
        with contextlib.suppress(OSError, ValueError):
            info = json.loads(_holder_path(lock_path).read_text())
            holder = f"pid {info['pid']} on {info['host']} since {info['since']}"
        raise LockTimeout(
            f"{lock_path}: lock still held after {timeout_s:g} s by {holder}; "
            "wait for that process, or remove the lock file if it is gone"
        ) from None
    try:
        with contextlib.suppress(OSError):
            _holder_path(lock_path).write_text(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    }
                )
            )
        yield lock_path
    finally:
        with contextlib.suppress(OSError):
            _holder_path(lock_path).unlink()
        lock.release()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Write ``path`` all-or-nothing; on any exception the old file stays and the temp is removed."""
    if not any(c in mode for c in "wa") or "r" in mode:
        raise ValueError(f"atomic_write needs a write mode, got {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with open(tmp, mode.replace("a", "w"), **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(OSError):
            # mkstemp creates 0600; give the file the permissions a plain open() would.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
