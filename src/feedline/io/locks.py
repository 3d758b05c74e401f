"""Process locks: one writer of a file at a time, across processes, with a bounded wait.

Installing the file itself is :mod:`feedline.io.atomic`'s job; a lock only decides who builds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

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
