"""One unit of a resumable file job, tried with retries: what curate's taggers and
``feedline tokenize`` both run, in process, in a spawn pool or on Ray.

A failure of the file itself comes back in the :class:`TaskResult` instead of as an exception,
so every executor reports failures the same way and one bad file does not stop a run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from feedline.run.retry import pause_before_retry

__all__ = ["TaskResult", "attempt_task"]

log = logging.getLogger("feedline.run")

R = TypeVar("R", bound="TaskResult")


@dataclass
class TaskResult:
    """How one file went: ``ok``, or the ``error`` naming it; parts subclass it for their counts."""

    source: str
    ok: bool
    documents: int = 0
    attempts: int = 1
    error: str = ""
    seconds: float = 0.0

    def describe(self) -> str:
        """The error naming the file once (most errors already start with the file's name)."""
        return self.error if self.error.startswith(self.source) else f"{self.source}: {self.error}"


def attempt_task(
    source: str, work: Callable[[], dict[str, Any]], retries: int, *,
    retryable: type[Exception], known: type[Exception], result: type[R] = TaskResult,  # type: ignore[assignment]
    logger: logging.Logger = log, **fields: Any,
) -> R:
    """``work()`` (which returns the result's fields on success) with up to ``retries`` retries
    on ``retryable``; a ``known`` error is the result's error as it is, any other carries its
    type. Never raises for a failure of the file itself, so every executor (in-process, spawn
    pool, Ray) reports failures the same way. ``fields`` go into every result."""
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            done = work()
            return result(source, True, attempts=attempts, seconds=time.monotonic() - started,
                          **fields, **done)
        except retryable as exc:
            if attempts > retries:
                error = f"{exc} (after {attempts} attempts)"
                break
            logger.warning("%s: retrying after: %s", source, exc)
            pause_before_retry(attempts - 1)  # jittered: workers that failed together spread out
        except known as exc:
            error = str(exc)
            break
        except Exception as exc:  # a bug in a tagger, tokenizer or reader: with the file name
            error = f"{type(exc).__name__}: {exc}"
            break
    return result(source, False, attempts=attempts, error=error, seconds=time.monotonic() - started,
                  **fields)
