"""What a staged dedup task cost: CPU seconds, its worker's peak RSS and its own growth.

Why: ``dedup.json`` and the Ray benchmark report per-stage CPU and memory, and a Ray worker
runs many tasks, so each task resets the peak it reports and gives freed heap back afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import time
from typing import Any


def start_usage() -> tuple[float, int]:
    """Start a task's accounting: reset this process's peak RSS (Linux ``clear_refs`` 5), so a
    reused worker reports the task's own peak rather than its earlier tasks'."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not Linux, or not allowed: the process's lifetime peak is reported instead
    return time.process_time(), _rss("VmRSS:")


def _rss(field: str = "VmHWM:") -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _trim_heap() -> None:
    """Give the heap pages this task freed back to the OS (glibc keeps them otherwise), so a
    long-lived worker's RSS falls back to its idle size between tasks."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: pages stay, nothing breaks
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def task_usage(started: tuple[float, int]) -> dict[str, Any]:
    """CPU seconds of this task, its worker's peak RSS and the task's growth over the RSS it
    started with (what the task itself needed; for the benchmark and ``dedup.json``)."""
    peak = _rss()
    _trim_heap()
    return {"cpu_s": round(time.process_time() - started[0], 4), "peak_rss": peak,
            "task_rss": max(0, peak - started[1]), "start_rss": started[1], "pid": os.getpid()}
