"""call_with_retries: only TransientError is retried, with capped full-jitter backoff.

The flaky functions here are plain callables: retry.py knows nothing of networks, and the
server-side faults (503, drops, stalls) are exercised through the fault proxy in
http/test_client.py and test_faults.py.
"""

from __future__ import annotations

import logging
import random

import pytest

from feedline.io import NotFoundError, TransientError
from feedline.io.retry import RetryPolicy, call_with_retries


def flaky(failures: list[Exception], result: str = "ok"):
    calls = [0]

    def fn() -> str:
        calls[0] += 1
        if failures:
            raise failures.pop(0)
        return result

    return fn, calls


def test_delays_are_full_jitter_under_a_doubling_cap() -> None:
    policy = RetryPolicy(attempts=8, base_s=0.1, max_s=1.0)
    rng = random.Random(0)
    for attempt in range(8):
        cap = min(1.0, 0.1 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(300)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > 0.8 * cap, "spread over the whole window, not a fixed pause"


def test_transient_failures_are_retried_until_success(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="feedline.io.retry")
    fn, calls = flaky([TransientError("reset"), TransientError("503")])
    assert call_with_retries(fn, policy=RetryPolicy(attempts=3, base_s=0.001, max_s=0.002), what="GET x") == "ok"
    assert calls[0] == 3
    assert [r.args[2] for r in caplog.records] == [1, 2] and all("GET x" in r.getMessage() for r in caplog.records)


def test_the_last_transient_failure_is_raised_after_all_attempts() -> None:
    fn, calls = flaky([TransientError(f"try {i}") for i in range(5)])
    with pytest.raises(TransientError, match="try 2"):
        call_with_retries(fn, policy=RetryPolicy(attempts=3, base_s=0.001, max_s=0.002))
    assert calls[0] == 3


@pytest.mark.parametrize("error", [NotFoundError("404"), ValueError("bug"), KeyboardInterrupt()])
def test_anything_else_is_raised_at_once(error, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="feedline.io.retry")
    fn, calls = flaky([error])
    with pytest.raises(type(error)):
        call_with_retries(fn, policy=RetryPolicy(attempts=5, base_s=10, max_s=10))  # would sleep if retried
    assert calls[0] == 1 and not caplog.records
