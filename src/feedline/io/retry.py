"""Capped exponential backoff with jitter, for transient failures only, within one deadline.

A 404 or 403 is an answer, not a hiccup: only :class:`TransientError` is retried, so a wrong URL
fails in milliseconds instead of after a minute of backoff. What *is* retried (refused and reset
connections, timeouts, 5xx, 429, S3 SlowDown) is retried for as long as real stores take to come
back from a restart, a failover or throttling: ``outage_s`` (60 s), not a count of attempts.

Two clocks bound the waiting:

* each call has one deadline, ``outage_s`` after it started: every attempt of it (socket timeouts
  and the HTTP client's pace check read :func:`deadline`) ends by then, so a trickling server
  costs ``outage_s`` in all, not ``attempts x timeout_s``;
* each store has one outage clock, started by its first failure and stopped by its next success:
  a call on a store that has been failing for longer than ``outage_s`` gives up on its first
  failure, so layers that retry around these calls (a download's own loop, a curate task's
  retries) add attempts, not further minutes.

While a store is failing, one warning says so (per process; each DataLoader worker is one) and
one line says when it answered again; that first success also wakes the calls pausing on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from feedline.io.errors import IoError, StoreUnavailableError, TransientError

T = TypeVar("T")
log = logging.getLogger(__name__)

#: How long a store may fail before reads of it give up: the io default everywhere.
DEFAULT_OUTAGE_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: for ``outage_s`` seconds, pausing between ``base_s * 2**k / 2`` and
    ``base_s * 2**k`` (capped at ``max_s``) after the k-th failure.

    ``attempts`` is the most attempts of one call; 0 (the default) derives it from ``outage_s``:
    enough that the shortest pauses alone add up to ``outage_s``. A loop that counts failures
    itself with :meth:`delay` (a download's) then waits out the same outage.
    """

    attempts: int = 0
    base_s: float = 0.05
    max_s: float = 2.0
    outage_s: float = DEFAULT_OUTAGE_S

    def __post_init__(self) -> None:
        if self.attempts <= 0:
            object.__setattr__(self, "attempts", self._attempts_for_outage())

    def _attempts_for_outage(self) -> int:
        waited, attempts = 0.0, 1
        while waited < self.outage_s:
            step = self._cap(attempts - 1) / 2
            if step <= 0:
                return 1 << 30  # no pauses at all: only the deadline bounds the attempts
            waited += step
            attempts += 1
        return attempts

    def _cap(self, attempt: int) -> float:
        return min(self.max_s, self.base_s * (2 ** min(attempt, 64)))

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Jitter over the upper half of the window ("equal jitter"): clients failing together
        spread out, and a count of pauses still stands for a least amount of time."""
        cap = self._cap(attempt)
        return rng.uniform(cap / 2, cap)

    def with_outage(self, outage_s: float) -> RetryPolicy:
        """This policy with another ``outage_s`` (and its attempts derived again)."""
        return replace(self, outage_s=float(outage_s), attempts=0)


DEFAULT_RETRY = RetryPolicy()

#: The environment variable that sets the io default ``outage_s`` for every store a process
#: opens (downloads, curate readers, ``feedline stat``/``cat``) that is not given one.
OUTAGE_ENV = "FEEDLINE_OUTAGE_S"


def default_retry() -> RetryPolicy:
    """The io default policy: :data:`DEFAULT_RETRY`, with ``$FEEDLINE_OUTAGE_S`` if it is set."""
    text = os.environ.get(OUTAGE_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY
    try:
        outage_s = float(text)
    except ValueError:
        outage_s = -1.0
    if not outage_s > 0:
        raise IoError(f"{OUTAGE_ENV}={text!r}: expected a number of seconds > 0")
    return DEFAULT_RETRY.with_outage(outage_s)

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("feedline_io_deadline", default=None)


def deadline() -> float | None:
    """The ``time.monotonic()`` by which the current call must end (``None`` outside one)."""
    return _DEADLINE.get()


def remaining(limit: float) -> float:
    """``limit`` seconds, or fewer when the current call's deadline is nearer (never below 10 ms)."""
    end = _DEADLINE.get()
    if end is None:
        return limit
    return max(0.01, min(limit, end - time.monotonic()))


_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("feedline_quiet_outages", default=False)


@contextlib.contextmanager
def quiet_outages() -> Iterator[None]:
    """No outage warning from the calls made in this context: for a probe that reports its own
    failure in one line (``feedline train``'s source check), a warning first would be a second."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


class _Outages:
    """Per store: when its current run of failures began, and its latest failure.
    Process-wide, thread-safe.

    A run ends with the store's next success, or when nothing failed on it for ``outage_s``
    (nobody was trying: a failure after that is a new outage, not the tail of the old one).
    The success also wakes every call pausing on the store (:meth:`pause`): the first retry to
    get through tells the rest, so an epoch resumes when the store does, not a backoff later.
    """

    def __init__(self) -> None:
        self._runs: dict[str, tuple[float, float]] = {}
        self._wake: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def pause(self, store: str, seconds: float) -> None:
        """Sleep ``seconds``, or until a call on ``store`` succeeds."""
        with self._lock:
            wake = self._wake.setdefault(store, threading.Event())
        wake.wait(seconds)

    def failed(self, store: str, exc: BaseException, outage_s: float) -> float:
        """Record a failure; returns the seconds the store has been failing (warns on the first)."""
        now = time.monotonic()
        with self._lock:
            began, last = self._runs.get(store, (now, now))
            new = began == now or now - last > outage_s
            if new:
                began = now
            self._runs[store] = (began, now)
        if new and not _QUIET.get():
            log.warning(
                "store %s unreachable (%s); retrying for up to %g s", store, _cause(store, exc), outage_s
            )
        return now - began

    def succeeded(self, store: str) -> None:
        if store not in self._runs:  # the common case, without the lock
            return
        with self._lock:
            run = self._runs.pop(store, None)
            wake = self._wake.pop(store, None)
        if wake is not None:
            wake.set()
        if run is not None:
            log.warning("store %s answers again after %.1f s", store, time.monotonic() - run[0])


OUTAGES = _Outages()


def _cause(store: str, exc: BaseException) -> str:
    """The failure without the URL in front (the warning names the store already)."""
    text = str(exc)
    head, sep, rest = text.partition(": ")
    return rest if sep and ("://" in head or head.startswith(store)) else text


def retry_after(exc: BaseException) -> float:
    """The pause a failure's server asked for (``Retry-After``), 0 when it asked for none."""
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


#: An attempt begun with less time than this left is clipped by the deadline, not by the store.
_CLIPPED_S = 0.25


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    what: str = "request",
    store: str | None = None,
) -> T:
    """Call ``fn`` until it returns or raises something other than :class:`TransientError`.

    Gives up with :class:`StoreUnavailableError` (a one-line message naming ``store``, or
    ``what``) once the call's deadline has passed, the store has been failing for ``outage_s``,
    or ``policy.attempts`` are used up.
    """
    began = time.monotonic()
    end = began + policy.outage_s
    outer = _DEADLINE.get()
    stop = end if outer is None else min(end, outer)
    token = _DEADLINE.set(stop)
    name = store or what
    rng: random.Random | None = None
    previous: TransientError | None = None
    try:
        for attempt in range(policy.attempts):
            before = stop - time.monotonic()
            try:
                result = fn()
            except TransientError as exc:
                now = time.monotonic()
                # Without a store there is no clock to share: the call's own deadline bounds it.
                failing = OUTAGES.failed(store, exc, policy.outage_s) if store else now - began
                left = stop - now
                if attempt + 1 >= policy.attempts or left <= 0 or failing >= policy.outage_s:
                    # a last attempt begun with almost no time left times out on the deadline
                    # itself: the failure worth naming is the last one of an attempt that had time
                    cause = previous if previous is not None and before < _CLIPPED_S else exc
                    raise _gave_up(name, what, cause, now - began, attempt + 1, policy) from None
                if before >= _CLIPPED_S:  # several attempts can fall in the clipped stretch
                    previous = exc
                rng = rng or random.Random()
                # a server's Retry-After is honoured, up to the call's deadline (outage_s)
                pause = min(max(policy.delay(attempt, rng), retry_after(exc)), left)
                log.debug("%s failed (%s); retry %d in %.2f s", what, exc, attempt + 1, pause)
                if store:
                    OUTAGES.pause(store, pause)
                else:
                    time.sleep(pause)
            else:
                if store:
                    OUTAGES.succeeded(store)
                return result
    finally:
        _DEADLINE.reset(token)
    raise AssertionError("unreachable")


def _gave_up(
    name: str, what: str, exc: TransientError, elapsed: float, attempts: int, policy: RetryPolicy
) -> StoreUnavailableError:
    """One line naming the object asked for (when it is not the store itself), the store and why."""
    if isinstance(exc, StoreUnavailableError):
        return exc  # an inner call already gave up and said why
    prefix = f"{what}: " if what != name and what != "request" else ""
    return StoreUnavailableError(
        f"{prefix}store {name} unavailable: {_cause(name, exc)} "
        f"(gave up after {attempts} attempts in {elapsed:.1f} s; outage_s={policy.outage_s:g})"
    )
