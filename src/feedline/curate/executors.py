"""Executors run the same :func:`~feedline.curate.task.run_task` anywhere.

* local, one process: in the calling process (no spawn cost, same retries and markers);
* local, N processes: a ``spawn`` pool, tasks pickled, progress through one queue handed to
  workers at start-up (no Manager process, no per-document messages);
* ray: one Ray task per file on the cluster ``ray.init(address=...)`` connects to (or the one
  already initialised), so the same job scales past one machine.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue as queue_module
import threading
import time
from typing import Any

from feedline.curate.errors import CurateError
from feedline.curate.progress import Progress
from feedline.curate.runtime import TagJob
from feedline.curate.task import Task, TaskResult, run_task

log = logging.getLogger("feedline.curate")

_QUEUE: Any = None
_STOP = object()


class _Reporter:
    """Worker-side progress batching; doubles its interval while the parent lags behind."""

    def __init__(self, progress_queue: Any, processes: int) -> None:
        self.queue = progress_queue
        self.pending = 0
        self.skip = 1
        self.calls = 0
        self.backlog = max(2, processes * 2)

    def __call__(self, documents: int) -> None:
        self.pending += documents
        self.calls += 1
        if self.calls % self.skip:
            return
        try:
            backed_up = self.queue.qsize() >= self.backlog
        except NotImplementedError:  # macOS has no qsize
            backed_up = False
        if backed_up:
            self.skip *= 2
            return
        self.queue.put(self.pending)
        self.pending = 0


def _init_worker(progress_queue: Any) -> None:
    global _QUEUE
    _QUEUE = progress_queue
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A killed parent (``kill -9``) must not leave workers finishing files behind its back."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _pool_task(args: tuple[Task, TagJob, int, int]) -> TaskResult:
    task, job, retries, processes = args
    reporter = _Reporter(_QUEUE, processes)
    result = run_task(task, job, retries, reporter)
    if reporter.pending:
        _QUEUE.put(reporter.pending)
    return result


def run_local(
    tasks: list[Task], job: TagJob, retries: int, skip_on_failure: bool, *, processes: int = 1, **_: Any
) -> list[TaskResult]:
    """Run the tasks in this process (``processes=1``) or in a spawn pool of ``processes``."""
    progress = Progress(len(tasks))
    results: list[TaskResult] = []
    try:
        if processes <= 1 or len(tasks) == 1:
            for task in tasks:
                result = run_task(task, job, retries, lambda n: progress.add(documents=n))
                progress.add(files=1)
                results.append(result)
                if not result.ok:
                    _report_failure(result, skip_on_failure)
                    if not skip_on_failure:
                        break
            return results
        ctx = mp.get_context("spawn")
        progress_queue = ctx.Queue()
        drain = threading.Thread(target=_drain, args=(progress_queue, progress), daemon=True)
        drain.start()
        pool = ctx.Pool(min(processes, len(tasks)), initializer=_init_worker, initargs=(progress_queue,))
        try:
            for result in pool.imap_unordered(_pool_task, [(t, job, retries, processes) for t in tasks]):
                progress.add(files=1)
                results.append(result)
                if not result.ok:
                    _report_failure(result, skip_on_failure)
                    if not skip_on_failure:
                        pool.terminate()
                        break
            else:
                pool.close()
        finally:
            pool.terminate()
            pool.join()
            progress_queue.put(_STOP)
            drain.join(timeout=5)
        return results
    finally:
        progress.close()


def _drain(progress_queue: Any, progress: Progress) -> None:
    while True:
        try:
            item = progress_queue.get(timeout=1.0)
        except queue_module.Empty:
            continue
        except (EOFError, OSError):
            return
        if item is _STOP or not isinstance(item, int):
            return
        progress.add(documents=item)


def _report_failure(result: TaskResult, skip_on_failure: bool) -> None:
    if skip_on_failure:
        log.warning("%s: failed, skipped: %s", result.source, result.error)


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
    try:
        import ray
    except ImportError:
        raise CurateError("--executor ray needs Ray: pip install 'feedline[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=ray_address, ignore_reinit_error=True, log_to_driver=False)
    # Ray itself retries tasks whose worker died (system failures); application errors come
    # back as failed TaskResults, retried inside run_task only when they are RetryableFailure.
    remote = ray.remote(num_cpus=1, max_retries=max(retries, 1))(_ray_task)
    progress = Progress(len(tasks))
    results: list[TaskResult] = []
    pending = [remote.remote(task, job, retries) for task in tasks]
    by_ref = dict(zip(pending, tasks, strict=True))
    started = time.monotonic()
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ref = ready[0]
            try:
                result = ray.get(ref)
            except Exception as exc:  # the worker died past Ray's own retries
                result = TaskResult(by_ref[ref].source, False, error=f"Ray task failed: {type(exc).__name__}: {exc}")
            progress.add(files=1, documents=result.documents)
            results.append(result)
            if not result.ok:
                _report_failure(result, skip_on_failure)
                if not skip_on_failure:
                    for ref in pending:
                        ray.cancel(ref)
                    break
    finally:
        progress.close()
    log.debug("ray: %d tasks in %.1fs", len(results), time.monotonic() - started)
    return results


#: Executor name (``feedline tag --executor``) -> the function that runs a run's pending tasks.
EXECUTORS = {"local": run_local, "ray": run_ray}
