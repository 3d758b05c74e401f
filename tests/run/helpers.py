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


def exit_on_two(item: int, report: Callable[[int], None]) -> int:
    """Item 2 ends its worker process with status 3, as a crashing extension or a tagger calling
    ``os._exit`` does; the others take a moment, so one is in flight when it happens."""
    if item == 2:
        os._exit(3)
    time.sleep(0.3)
    return item


def write_pid_or_wait(item: str, report: Callable[[int], None]) -> str:
    """Items ending in ``victim`` write their worker's pid and sleep (to be killed); others pass."""
    if item.endswith("victim"):
        write_pid_then_sleep(item, report)
    return item


def describe_item(item: object) -> str:
    return f"the item {item!r}"


def record_cleanup(item: object) -> None:
    """Cleanup hook of the tests: notes which items the pool cleaned up after, beside them."""
    if isinstance(item, str):
        with open(item + ".cleaned", "w") as handle:
            handle.write("1")



def fail_once_victim_runs(item: str, report: Callable[[int], None]) -> str:
    """The ``victim`` item writes its pid and sleeps; any other item waits until the victim (in
    the same folder) is in flight, then fails."""
    if item.endswith("victim"):
        write_pid_then_sleep(item, report)
        return item
    victim = os.path.join(os.path.dirname(item), "victim")
    deadline = time.monotonic() + 60
    while not (os.path.exists(victim) and os.path.getsize(victim)) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise ValueError(f"{item} failed")
