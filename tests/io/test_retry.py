"""call_with_retries: only TransientError is retried, with capped jittered backoff, within outage_s.

The flaky functions here are plain callables: retry.py knows nothing of networks, and the
server-side faults (503, drops, stalls) are exercised through the fault proxy in
http/test_client.py and test_faults.py.
"""

from __future__ import annotations

import logging
import random
import time

import pytest

from feedline.io import NotFoundError, StoreUnavailableError, TransientError
from feedline.io.retry import RetryPolicy, call_with_retries


def flaky(failures: list[Exception], result: str = "ok"):
    calls = [0]

    def fn() -> str:
        calls[0] += 1
        if failures:
            raise failures.pop(0)
        return result

    return fn, calls


def test_delays_are_jittered_in_the_upper_half_under_a_doubling_cap() -> None:
    policy = RetryPolicy(attempts=8, base_s=0.1, max_s=1.0)
    rng = random.Random(0)
    for attempt in range(8):
        cap = min(1.0, 0.1 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(300)]
        assert all(cap / 2 <= d <= cap for d in delays)
        assert max(delays) > 0.9 * cap and min(delays) < 0.6 * cap, "spread, not a fixed pause"


def test_transient_failures_are_retried_until_success(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="feedline.io.retry")
    fn, calls = flaky([TransientError("reset"), TransientError("503")])
    assert call_with_retries(fn, policy=RetryPolicy(attempts=3, base_s=0.001, max_s=0.002), what="GET x") == "ok"
    assert calls[0] == 3
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.args[2] for r in debug] == [1, 2] and all("GET x" in r.getMessage() for r in debug)


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


def test_transient_failures_are_retried_for_outage_s_not_a_count() -> None:
    fn, calls = flaky([TransientError("http://h:1/x: ConnectionRefusedError: refused")] * 1000)
    policy = RetryPolicy(base_s=0.01, max_s=0.05, outage_s=0.6)
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=r"store s3://b unavailable: ConnectionRefused.*outage_s=0.6"):
        call_with_retries(fn, policy=policy, store="s3://b")
    assert 0.6 <= time.monotonic() - began < 0.6 + 0.2
    assert calls[0] > 6, "more attempts than the old fixed six"


def test_default_attempts_cover_outage_s_with_the_shortest_pauses() -> None:
    for outage in (2.0, 60.0):
        policy = RetryPolicy(outage_s=outage)
        shortest = sum(policy._cap(k) / 2 for k in range(policy.attempts - 1))
        assert shortest >= outage  # a loop counting attempts (a download's) waits it out too
    assert RetryPolicy(attempts=3).attempts == 3


def test_one_warning_per_outage_and_one_note_when_it_answers(caplog) -> None:
    caplog.set_level(logging.INFO, logger="feedline.io.retry")
    policy = RetryPolicy(base_s=0.001, max_s=0.002, outage_s=5)
    for _ in range(3):  # three calls failing through the same outage, in turn
        fn, _calls = flaky([TransientError("http://h:2/x: ConnectionRefusedError: refused")] * 4)
        assert call_with_retries(fn, policy=policy, store="http://h:2") == "ok"
        fn, _calls = flaky([TransientError("http://h:2/x: HTTP 503")] * 2)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert messages[0] == "store http://h:2 unreachable (ConnectionRefusedError: refused); retrying for up to 5 s"
    assert messages[1].startswith("store http://h:2 answers again after ")
    assert len(messages) == 6  # each call here saw one outage: one warning and one note each


def test_a_store_failing_for_longer_than_outage_s_fails_fast_afterwards() -> None:
    """Layers that retry around a call (a download's loop) add attempts, not more minutes."""
    policy = RetryPolicy(base_s=0.01, max_s=0.05, outage_s=1.0)
    down = [TransientError("refused")] * 1000
    fn, _calls = flaky(down)
    with pytest.raises(StoreUnavailableError):
        call_with_retries(fn, policy=policy, store="http://h:3")
    fn, calls = flaky(down)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        call_with_retries(fn, policy=policy, store="http://h:3")
    # the store's outage clock already passed outage_s: no new wait of outage_s (on a loaded
    # machine the clock can be read just before it runs out, so one more attempt may be made)
    assert calls[0] <= 2 and time.monotonic() - started < 0.5
    fn, calls = flaky([])  # the store answers: its clock stops, the next outage gets its time
    call_with_retries(fn, policy=policy, store="http://h:3")
    fn, calls = flaky([TransientError("refused")] * 3)
    assert call_with_retries(fn, policy=policy, store="http://h:3") == "ok" and calls[0] == 4


def test_a_success_on_the_store_wakes_the_calls_pausing_on_it() -> None:
    """The first retry that gets through ends the others' pauses: no backoff after recovery."""
    import threading

    policy = RetryPolicy(base_s=5.0, max_s=5.0, outage_s=30)  # every pause 2.5-5 s
    fn, _calls = flaky([TransientError("refused")])
    waiter = threading.Thread(target=call_with_retries, args=(fn,), kwargs={"policy": policy, "store": "http://h:4"})
    waiter.start()
    time.sleep(0.2)  # the waiter failed once and is pausing
    began = time.monotonic()
    assert call_with_retries(lambda: "ok", policy=policy, store="http://h:4") == "ok"
    waiter.join(timeout=10)
    assert not waiter.is_alive() and time.monotonic() - began < 1.0


def test_feedline_outage_s_sets_the_io_default(monkeypatch) -> None:
    from feedline.io import IoError, open_store
    from feedline.io.retry import DEFAULT_RETRY, default_retry

    assert default_retry() is DEFAULT_RETRY and DEFAULT_RETRY.outage_s == 60
    monkeypatch.setenv("FEEDLINE_OUTAGE_S", "7.5")
    assert default_retry().outage_s == 7.5
    assert open_store("http://127.0.0.1:9/x").client.retry.outage_s == 7.5
    assert open_store("memory://x").retry.outage_s == 7.5
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv("FEEDLINE_OUTAGE_S", bad)
        with pytest.raises(IoError, match=f"FEEDLINE_OUTAGE_S='{bad}': expected a number of seconds > 0"):
            default_retry()


@pytest.mark.parametrize("pause_s", [0.2, 0.02])  # one attempt in the last moment, or several
def test_a_last_attempt_clipped_by_the_deadline_names_the_failure_before_it(pause_s: float) -> None:
    # the server answers 503 until the deadline; an attempt begun in the last moment times out
    # on the deadline itself, which says nothing of the store
    deadline = time.monotonic() + 0.4

    def fn() -> str:
        if deadline - time.monotonic() < 0.05:
            raise TransientError("read timed out after 0.01 s")
        raise TransientError("HTTP 503 Service Unavailable")

    policy = RetryPolicy(attempts=1000, base_s=pause_s, max_s=pause_s, outage_s=0.4)
    with pytest.raises(StoreUnavailableError, match="503") as info:
        call_with_retries(fn, policy=policy, what="GET x")
    assert "timed out" not in str(info.value)
