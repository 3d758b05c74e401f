"""Exponential backoff with full jitter, for transient failures only.

A 404 or 403 is an answer, not a hiccup: only :class:`TransientError` is retried, so a wrong URL
fails in milliseconds instead of after a minute of backoff.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from feedline.io.errors import TransientError

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: ``attempts`` in total, sleeping up to ``base_s * 2**k`` (capped) between."""

    attempts: int = 6
    base_s: float = 0.05
    max_s: float = 5.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: spreads retries of many clients hitting the same server."""
        return rng.uniform(0.0, min(self.max_s, self.base_s * (2**attempt)))


DEFAULT_RETRY = RetryPolicy()


def call_with_retries(
    fn: Callable[[], T], *, policy: RetryPolicy = DEFAULT_RETRY, what: str = "request"
) -> T:
    """Call ``fn`` until it returns or raises something other than :class:`TransientError`."""
    rng: random.Random | None = None
    for attempt in range(policy.attempts):
        try:
            return fn()
        except TransientError as exc:
            if attempt + 1 >= policy.attempts:
                raise
            rng = rng or random.Random()
            pause = policy.delay(attempt, rng)
            log.debug("%s failed (%s); retry %d in %.2f s", what, exc, attempt + 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")
