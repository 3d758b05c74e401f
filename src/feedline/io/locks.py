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


def _held_fd(lock: filelock.FileLock) -> int | None:
    """The descriptor filelock holds (``None`` when this filelock version does not say)."""
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    return fd if isinstance(fd, int) else None


def _still_linked(lock_path: Path, fd: int) -> bool:
    """Whether ``fd`` is still the file at ``lock_path``: a holder that removed the lock file
    leaves waiters locking an unlinked inode, which guards nothing."""
    try:
        on_disk, held = os.stat(lock_path), os.fstat(fd)
    except OSError:
        return False
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def process_lock(path: str | os.PathLike[str], timeout_s: float, *, remove: bool = False) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` across processes, waiting at most ``timeout_s``.

    The holder writes who it is next to the lock so that a waiter that gives up can say which
    process it waited for (the lock file itself must stay empty for filelock).

    ``remove=True`` deletes the lock file on the way out (while still holding it), so finished
    work leaves no ``.lock`` behind. Every user of a removable lock checks after acquiring that
    it locked the file that is at ``path`` now, and tries again otherwise.
    """
    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + max(timeout_s, 0.0)
    try:
        while True:
            lock = filelock.FileLock(str(lock_path), is_singleton=False)
            lock.acquire(timeout=-1 if timeout_s < 0 else max(deadline - time.monotonic(), 0.0))
            fd = _held_fd(lock)
            if fd is None:
                remove = False  # cannot check the inode: keep the file, as before
                break
            if _still_linked(lock_path, fd):
                break
            lock.release()  # we won a lock on a file another holder had already removed
            if timeout_s >= 0 and time.monotonic() > deadline:
                raise filelock.Timeout(str(lock_path))
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
        if remove:
            with contextlib.suppress(OSError):
                lock_path.unlink()
        lock.release()
