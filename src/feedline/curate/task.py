"""One tagging task: one input file tagged with retries, then its ``.done`` marker written.

Executors (in-process, spawn pool, Ray) all run :func:`run_task` and get a :class:`TaskResult`
back, never an exception for a failure of the file itself, so every executor reports failures
the same way. The processor plans tasks and decides; this module only does one. The marker is a
:class:`feedline.run.markers.DoneMarker` tied to a digest of the job's signature, so a file
counts as done only for the same taggers, experiment, destination, options (and corpus).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from feedline.curate.errors import CurateError, RetryableFailure
from feedline.curate.runtime import FileTagger, TagJob
from feedline.run.markers import DoneMarker, params_digest
from feedline.run.retry import pause_before_retry

log = logging.getLogger("feedline.curate")

R = TypeVar("R", bound="TaskResult")
MARKER_SUFFIX = ".done"


@dataclass(frozen=True)
class Task:
    """One input file: ``source`` the document file it reads (path or URL), ``marker`` where its
    ``.done`` marker goes, ``base`` the common folder of the run's files."""

    source: str
    marker: str
    base: str


@dataclass
class TaskResult:
    source: str
    ok: bool
    documents: int = 0
    attempts: int = 1
    error: str = ""
    seconds: float = 0.0

    def describe(self) -> str:
        """The error naming the file once (most errors already start with the file's name)."""
        return self.error if self.error.startswith(self.source) else f"{self.source}: {self.error}"


def done_marker(task: Task, job: TagJob) -> DoneMarker:
    """``task``'s marker, valid only when written by a job with the same signature."""
    return DoneMarker(task.marker, params_digest(job.signature()))


_WORKER_TAGGERS: dict[TagJob, FileTagger] = {}


def _tagger_for(job: TagJob) -> FileTagger:
    tagger = _WORKER_TAGGERS.get(job)
    if tagger is None:
        tagger = _WORKER_TAGGERS[job] = FileTagger(job)
    return tagger


def run_task(task: Task, job: TagJob, retries: int, progress: Callable[[int], None] | None = None) -> TaskResult:
    """Tag one file with retries on :class:`RetryableFailure`, then write its marker.

    Never raises for a failure of the file itself: the result carries the error, so every
    executor (in-process, spawn pool, Ray) reports failures the same way.
    """

    def tag() -> dict[str, Any]:
        documents = _tagger_for(job).tag_file(task.source, task.base, progress)
        done_marker(task, job).write(source=task.source, documents=documents)
        return {"documents": documents}

    return attempt_task(task.source, tag, retries, retryable=RetryableFailure, known=CurateError)


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
