"""One spawn pool for every parallel job: progress through one queue, workers that die with
their parent.

Why ``spawn``: a forked worker inherits the parent's threads and locks (a download thread, the
HTTP pool, a tqdm monitor) in whatever state they were; a spawned one starts clean. Why one queue
handed to workers at start-up: no Manager process and no per-document messages; a worker batches
its counts and, when the queue backs up, doubles its own interval, so progress never costs more
than the work. Why the orphan guard: a parent killed with ``kill -9`` must not leave workers
finishing files (and writing markers) behind its back.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["pool_map"]

T = TypeVar("T")
R = TypeVar("R")

_STOP = None  # the one sentinel that ends the drain thread
_QUEUE: Any = None
_PROCESSES = 1


class _Reporter:
    """Worker-side progress batching; doubles its interval while the parent lags behind."""

    def __init__(self, progress_queue: Any, processes: int) -> None:
        self.queue = progress_queue
        self.pending = 0
        self.skip = 1
        self.calls = 0
        self.backlog = max(2, processes * 2)

    def __call__(self, n: int) -> None:
        self.pending += n
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
        self.flush()

    def flush(self) -> None:
        if self.pending:
            self.queue.put(self.pending)
            self.pending = 0


def _init_worker(progress_queue: Any, processes: int) -> None:
    global _QUEUE, _PROCESSES
    _QUEUE = progress_queue
    _PROCESSES = processes
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A killed parent (``kill -9``) must not leave workers finishing work behind its back."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _call(args: tuple[Callable[[Any, Callable[[int], None]], Any], Any]) -> Any:
    fn, item = args
    reporter = _Reporter(_QUEUE, _PROCESSES)
    try:
        return fn(item, reporter)
    finally:
        reporter.flush()


def _drain(progress_queue: Any, progress: Callable[[int], None]) -> None:
    while True:
        try:
            item = progress_queue.get(timeout=1.0)
        except queue_module.Empty:
            continue
        except (EOFError, OSError):
            return
        if item is _STOP or not isinstance(item, int):
            return
        progress(item)


def pool_map(
    fn: Callable[[T, Callable[[int], None]], R],
    items: Sequence[T] | Iterable[T],
    *,
    processes: int,
    progress: Callable[[int], None] | None = None,
    ordered: bool = False,
) -> Iterator[R]:
    """``fn(item, report)`` for every item, in this process (``processes`` <= 1 or one item) or
    in a spawn pool; yields the results (in order with ``ordered``, else as they finish).

    ``fn`` must be a module-level function (it is pickled by name); it calls ``report(n)`` with
    amounts done, which reach ``progress`` in the parent. Leaving the loop early (``break``, an
    exception) terminates the workers: nothing goes on running for a run that already stopped.
    An exception raised by ``fn`` comes back to the caller as it was raised.
    """
    items = list(items)
    report = progress if progress is not None else (lambda n: None)
    if processes <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item, report)
        return
    ctx = mp.get_context("spawn")
    progress_queue = ctx.Queue()
    drain = threading.Thread(target=_drain, args=(progress_queue, report), daemon=True)
    drain.start()
    workers = min(processes, len(items))
    pool = ctx.Pool(workers, initializer=_init_worker, initargs=(progress_queue, processes))
    try:
        run = pool.imap if ordered else pool.imap_unordered
        yield from run(_call, [(fn, item) for item in items])
        # Joined, not terminated: a worker's last counts may still sit in its queue feeder thread,
        # which a worker that exits on its own flushes and a terminated one loses.
        pool.close()
        pool.join()
    finally:
        pool.terminate()
        pool.join()
        progress_queue.put(_STOP)
        drain.join(timeout=5)
