"""Errors of the shared run machinery: what a pool or a cluster, not a file, did wrong."""

from __future__ import annotations

import signal

from feedline.errors import FeedlineError


class RunError(FeedlineError):
    """A worker pool or a Ray cluster failed the run; the message says which and what to do."""


class WorkerDiedError(RunError):
    """A pool worker process ended while it held an item (``os._exit``, ``kill -9``, the OOM
    killer): the run stops at once, naming the item and how the process ended, instead of
    waiting forever for a result that cannot come."""

    def __init__(self, label: str, pid: int | None, exitcode: int | None) -> None:
        self.label = label
        self.pid = pid
        self.exitcode = exitcode
        super().__init__(f"{label}: worker process {pid} died ({exit_status(exitcode)}) while processing it; "
                         "the run stopped")


def exit_status(exitcode: int | None) -> str:
    """``exit status 3`` or ``killed by signal 9 (SIGKILL)``, from a ``Process.exitcode``."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode >= 0:
        return f"exit status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        return f"killed by signal {-exitcode}"
    return f"killed by signal {-exitcode} ({name})"
