"""Module-level work functions for the spawn pool tests (spawned workers import them by name)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def square(item: int, report: Callable[[int], None]) -> int:
    report(item)
    return item * item


def fail_on_three(item: int, report: Callable[[int], None]) -> int:
    if item == 3:
        raise ValueError(f"item {item} is bad")
    return item


def write_pid_then_sleep(item: str, report: Callable[[int], None]) -> None:
    with open(item, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(60)
