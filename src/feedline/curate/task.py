"""One tagging task: one input file tagged with retries, then its ``.done`` marker written.

Executors (in-process, spawn pool, Ray) all run :func:`run_task` and get a
:class:`feedline.run.task.TaskResult` back (``feedline tokenize`` shares that and its retry loop), never an exception for a failure of the file itself, so every executor reports failures
the same way. The processor plans tasks and decides; this module only does one. The marker is a
:class:`feedline.run.markers.DoneMarker` tied to a digest of the job's signature, so a file
counts as done only for the same taggers, experiment, destination, options (and corpus).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedline.curate.errors import CurateError, RetryableFailure
from feedline.curate.runtime import FileTagger, TagJob
from feedline.run.markers import DoneMarker, params_digest
from feedline.run.task import TaskResult, attempt_task

log = logging.getLogger("feedline.curate")

MARKER_SUFFIX = ".done"


@dataclass(frozen=True)
class Task:
    """One input file: ``source`` the document file it reads (path or URL), ``marker`` where its
    ``.done`` marker goes, ``base`` the common folder of the run's files."""

    source: str
    marker: str
    base: str


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

    return attempt_task(task.source, tag, retries, retryable=RetryableFailure, known=CurateError,
                        logger=log)
