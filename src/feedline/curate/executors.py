"""Executors run the same :func:`~feedline.curate.task.run_task` anywhere.

* local, one process: in the calling process (no spawn cost, same retries and markers);
* local, N processes: :func:`feedline.run.pool.pool_map`'s spawn pool, tasks pickled, document
  counts through its one progress queue, workers that exit when the run is killed;
* ray: one Ray task per file on the cluster ``ray.init(address=...)`` connects to (or the one
  already initialised), through :func:`feedline.run.ray_driver.ray_map`, so the same job scales
  past one machine.

Either way a failed file stops the run (the tasks still running are dropped) unless
``skip_on_failure``, which reports it and goes on. A pool worker that dies (``os._exit``,
``kill -9``) stops the run whatever ``skip_on_failure`` says, with one line naming the file and
the exit status; that file's temps are removed, and finished files keep their markers.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from feedline.curate.errors import CurateError
from feedline.curate.runtime import TagJob, plan_outputs
from feedline.curate.task import Task, TaskResult, run_task
from feedline.io.atomic import remove_stale_temps
from feedline.run.pool import pool_map
from feedline.run.progress import Progress
from feedline.run.ray_driver import ray_map, ray_session

log = logging.getLogger("feedline.curate")


def _progress(tasks: list[Task]) -> Progress:
    """A bar of files with the documents tagged so far beside it."""
    return Progress("tag", total=len(tasks), unit="file", counters={"documents": None})


def _pool_task(args: tuple[Task, TagJob, int], report: Callable[[int], None]) -> TaskResult:
    task, job, retries = args
    return run_task(task, job, retries, report)


def _source_of(args: tuple[Task, TagJob, int]) -> str:
    return args[0].source


def _remove_partial_outputs(args: tuple[Task, TagJob, int]) -> None:
    """The temps a dead or terminated worker left beside the file's attribute files and marker
    (``.<name>.<8 hex>.tmp``); finished files and their ``.done`` markers stay, so a rerun resumes."""
    task, job, _ = args
    for path in (*plan_outputs(task.source, job, task.base), task.marker):
        remove_stale_temps(path)


def run_local(
    tasks: list[Task], job: TagJob, retries: int, skip_on_failure: bool, *, processes: int = 1, **_: Any
) -> list[TaskResult]:
    """Run the tasks in this process (``processes=1``) or in a spawn pool of ``processes``."""
    results: list[TaskResult] = []
    with _progress(tasks) as progress:
        done = pool_map(_pool_task, [(task, job, retries) for task in tasks], processes=processes,
                        progress=lambda n: progress.count(documents=n), describe=_source_of,
                        cleanup=_remove_partial_outputs)
        with contextlib.closing(done):  # leaving early terminates the workers at once
            for result in done:
                progress.update(1)
                results.append(result)
                if not result.ok and not _go_on(result, skip_on_failure):
                    break
    return results


def _go_on(result: TaskResult, skip_on_failure: bool) -> bool:
    """Whether the run goes on past a failed file (said once here, the rest at the end)."""
    if skip_on_failure:
        log.warning("%s: failed, skipped: %s", result.source, result.error)
    return skip_on_failure


def _ray_task(task: Task, job: TagJob, retries: int) -> TaskResult:
    return run_task(task, job, retries, None)


def run_ray(
    tasks: list[Task],
    job: TagJob,
    retries: int,
    skip_on_failure: bool,
    *,
    ray_address: str | None = None,
    **_: Any,
) -> list[TaskResult]:
    """Run the tasks as Ray tasks; Ray stays up after the run (the next run reuses it)."""

    def failed(index: int, exc: Exception) -> TaskResult:  # the worker died past Ray's own retries
        return TaskResult(tasks[index].source, False, error=f"Ray task failed: {type(exc).__name__}: {exc}")

    started = time.monotonic()
    results: list[TaskResult] = []
    with ray_session(ray_address, shutdown=False, error=CurateError) as ray, _progress(tasks) as progress:
        # Ray itself retries tasks whose worker died (system failures); application errors come
        # back as failed TaskResults, retried inside run_task only when they are RetryableFailure.
        done = ray_map(ray, _ray_task, [(task, job, retries) for task in tasks], progress=progress,
                       on_error=failed, max_retries=max(retries, 1))
        with contextlib.closing(done):  # leaving early cancels the tasks still pending
            for _, result in done:
                progress.count(documents=result.documents)
                results.append(result)
                if not result.ok and not _go_on(result, skip_on_failure):
                    break
    log.debug("ray: %d tasks in %.1fs", len(results), time.monotonic() - started)
    return results


#: Executor name (``feedline tag --executor``) -> the function that runs a run's pending tasks.
EXECUTORS = {"local": run_local, "ray": run_ray}
