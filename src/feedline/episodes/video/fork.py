"""Forked DataLoader workers never close the decoders their parent opened; they park them.

An open decoder (a codec context, a container, the frames they handed out) owns codec threads,
libdav1d's among them. A child made by ``fork`` inherits the objects but not the threads, and
closing one there waits for those threads forever: that happens when the child's garbage
collector finalizes a reader or pipeline the parent had dropped but not yet collected. So each
module that opens decoders registers its live objects here, with a function that detaches what
must not be closed; in a forked child every such part is kept, unclosed, for the child's life.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import TypeVar

__all__ = ["park_in_forked_child", "parked"]

T = TypeVar("T")

_PARKED: list[object] = []  # what children inherited and must never close


def parked(thing: object) -> None:
    """Keep ``thing`` for the rest of this process, never closing it (for use in a fork hook)."""
    _PARKED.append(thing)


def park_in_forked_child(live: weakref.WeakSet[T], detach: Callable[[T], object]) -> None:
    """In every forked child, call ``detach(obj)`` for each object still in ``live`` and keep what
    it returns (``detach`` leaves ``obj`` with fresh, empty state of its own)."""

    def _after_fork_in_child() -> None:
        for obj in list(live):
            _PARKED.append(detach(obj))

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
