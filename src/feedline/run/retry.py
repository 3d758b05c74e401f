"""The one retry policy for whole tasks: io's exponential backoff with jitter, slower steps.

A task (tag one file, mix one stream) that failed with a transient error is worth another try,
but not at once: many workers that failed together on one server must not come back together.
So task retries use :class:`feedline.io.retry.RetryPolicy`'s jitter, on a scale of seconds
instead of the per-request tens of milliseconds.
"""

from __future__ import annotations

import random
import time

from feedline.io.retry import RetryPolicy

__all__ = ["TASK_RETRY", "RetryPolicy", "pause_before_retry"]

#: Whole-task retries: up to 0.5 s, 1 s, 2 s ... capped at 10 s between attempts (jittered).
TASK_RETRY = RetryPolicy(attempts=1 << 30, base_s=0.5, max_s=10.0)

_RNG = random.Random()


def pause_before_retry(attempt: int, policy: RetryPolicy = TASK_RETRY) -> float:
    """Sleep before retry number ``attempt + 1`` (``attempt`` counts from 0); returns the pause."""
    pause = policy.delay(attempt, _RNG)
    time.sleep(pause)
    return pause
