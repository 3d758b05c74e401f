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

from feedline.curate.errors import CurateError, RetryableFailure
from feedline.curate.runtime import FileTagger, TagJob
from feedline.run.markers import DoneMarker, params_digest
from feedline.run.retry import pause_before_retry

log = logging.getLogger("feedline.curate")
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
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            documents = _tagger_for(job).tag_file(task.source, task.base, progress)
            done_marker(task, job).write(source=task.source, documents=documents)
            return TaskResult(task.source, True, documents, attempts, seconds=time.monotonic() - started)
        except RetryableFailure as exc:
            if attempts > retries:
                return TaskResult(task.source, False, 0, attempts, f"{exc} (after {attempts} attempts)",
                                  time.monotonic() - started)
            log.warning("%s: retrying after: %s", task.source, exc)
            pause_before_retry(attempts - 1)  # jittered: workers that failed together spread out
        except CurateError as exc:
            return TaskResult(task.source, False, 0, attempts, str(exc), time.monotonic() - started)
        except Exception as exc:  # a bug in a tagger or reader: report it with the file name
            return TaskResult(task.source, False, 0, attempts, f"{type(exc).__name__}: {exc}",
                              time.monotonic() - started)
