"""One validator for the integer settings every part takes (pool sizes, workers, batch sizes).

``bool`` is refused although it is an ``int`` subclass: ``pool_size=True`` is a caller's bug.
Any other integral number (a ``numpy.int64`` out of an episode-length array) is an integer to the
user, so it is accepted and returned as the Python ``int`` it equals.
The caller passes the name the *user* typed (a Python keyword, or a ``--flag`` in the CLI) and its
part's error class, so the message points at the right knob and ``except EpisodesError`` (etc.)
still catches it.
"""

from __future__ import annotations

import numbers
from typing import Any

from feedline.errors import FeedlineError


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    error: type[Exception] = FeedlineError,
) -> int:
    """``value`` as an ``int`` if it is an integer ``>= minimum``; else raise ``error`` naming ``name``.

    Args:
        name: the setting as the caller spelled it (``"episode_pool_size"``,
            ``"--dataset.streaming_episode_pool_size"``).
        value: what was given.
        minimum: smallest allowed value; ``None`` allows any integer.
        error: the exception class to raise (the calling part's error type).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        bound = "" if minimum is None else f" >= {minimum}"
        raise error(f"{name} must be an integer{bound}, got {shown(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise error(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def plain(value: Any) -> Any:
    """``value`` with numpy scalars (inside lists and tuples too) made the Python numbers they
    equal, so a message quoting it reads ``nan`` or ``1.5``, not ``np.float64(nan)``."""
    if isinstance(value, list | tuple):
        return type(value)(plain(v) for v in value)
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
        return item()
    return value


def shown(value: Any) -> str:
    """How a message quotes a value the user gave: its ``repr`` as a Python number or list."""
    return repr(plain(value))
