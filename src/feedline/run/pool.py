"""One spawn pool for every parallel job: progress through one queue, workers that die with
their parent, and a run that stops at once, naming the item, when a worker dies.

Why ``spawn``: a forked worker inherits the parent's threads and locks (a download thread, the
HTTP pool, a tqdm monitor) in whatever state they were; a spawned one starts clean. Why one queue
handed to workers at start-up: no Manager process and no per-document messages; a worker batches
its counts and, when the queue backs up, doubles its own interval, so progress never costs more
than the work. Why the orphan guard: a parent killed with ``kill -9`` must not leave workers
finishing files (and writing markers) behind its back.

Why not ``multiprocessing.Pool``: it silently replaces a worker that died (``os._exit``,
``kill -9``, the OOM killer) and the item that worker held never completes, so the run hangs.
``concurrent.futures`` notices the death but cannot say which item it held. Here each worker has
its own pipe and gets one item at a time, so the parent always knows which item each worker
holds; it waits on the pipes and the process sentinels together, and a sentinel that fires while
its worker holds an item ends the run with :class:`~feedline.run.errors.WorkerDiedError` naming
the item and the exit status, within moments of the death.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue as queue_module
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from feedline.run.errors import RunError, WorkerDiedError

__all__ = ["pool_map"]

log = logging.getLogger("feedline.run")

T = TypeVar("T")
R = TypeVar("R")

_STOP = None  # the one sentinel that ends the drain thread (and, sent to a worker, the worker)
_QUEUE: Any = None
_PROCESSES = 1
#: How long a terminated worker gets to exit before it is killed.
_TERMINATE_S = 5.0


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


def _worker_main(conn: Connection, progress_queue: Any, processes: int) -> None:
    """A worker: one ``(fn, item)`` at a time from its pipe, its outcome back on the same pipe.

    Ctrl-C reaches the whole process group; the parent handles it (and terminates the workers),
    so a worker ignores it rather than reporting an interrupted item as a failure of its own.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init_worker(progress_queue, processes)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent is gone
            return
        if task is _STOP:
            return
        try:
            outcome: tuple[str, Any] = ("ok", _call(task))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            outcome = ("error", exc)
        try:
            conn.send(outcome)
        except Exception as exc:  # the result or the exception does not pickle
            conn.send(("unsendable", f"{type(outcome[1]).__name__} could not be sent back: "
                                     f"{type(exc).__name__}: {exc}"))


def _drain(progress_queue: Any, progress: Callable[[int], None], stop: threading.Event) -> None:
    while True:
        try:
            item = progress_queue.get(timeout=0.2)
        except queue_module.Empty:
            if stop.is_set():
                return
            continue
        except (EOFError, OSError):
            return
        if item is _STOP or not isinstance(item, int):
            return
        progress(item)


class _Worker:
    """One spawned worker, its end of the pipe, and the index of the item it holds (if any)."""

    def __init__(self, ctx: Any, progress_queue: Any, processes: int) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, progress_queue, processes), daemon=True)
        self.process.start()
        child.close()  # the parent keeps only its end, so a dead worker reads as EOF at once
        self.index: int | None = None
        self.stopped = False

    def give(self, index: int, task: Any) -> bool:
        """Hand the worker an item; False when the worker is already gone."""
        try:
            self.conn.send(task)
        except (BrokenPipeError, ConnectionResetError):
            return False
        self.index = index
        return True

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.conn.send(_STOP)

    def exitcode(self) -> int | None:
        self.process.join(_TERMINATE_S)
        return self.process.exitcode

    def end(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(_TERMINATE_S)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def pool_map(
    fn: Callable[[T, Callable[[int], None]], R],
    items: Sequence[T] | Iterable[T],
    *,
    processes: int,
    progress: Callable[[int], None] | None = None,
    ordered: bool = False,
    describe: Callable[[T], str] | None = None,
    cleanup: Callable[[T], None] | None = None,
) -> Iterator[R]:
    """``fn(item, report)`` for every item, in this process (``processes`` <= 1 or one item) or
    in a spawn pool; yields the results (in order with ``ordered``, else as they finish).

    ``fn`` must be a module-level function (it is pickled by name); it calls ``report(n)`` with
    amounts done, which reach ``progress`` in the parent. Leaving the loop early (``break``, an
    exception) terminates the workers: nothing goes on running for a run that already stopped.
    An exception raised by ``fn`` comes back to the caller as it was raised.

    A worker process that dies while it holds an item raises :class:`WorkerDiedError` naming
    ``describe(item)`` (default ``item <index>``) and the exit status or signal. ``cleanup(item)``
    runs in the parent for every item whose worker died or was terminated while holding it, once
    that worker is gone: the place to remove the item's temp files.
    """
    items = list(items)
    report = progress if progress is not None else (lambda n: None)
    if processes <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item, report)
        return
    ctx = mp.get_context("spawn")
    progress_queue = ctx.Queue()
    stop_drain = threading.Event()
    drain = threading.Thread(target=_drain, args=(progress_queue, report, stop_drain), daemon=True)
    drain.start()
    workers = [_Worker(ctx, progress_queue, processes) for _ in range(min(processes, len(items)))]
    pending = deque(range(len(items)))
    finished: dict[int, R] = {}
    next_out = 0
    clean = False

    def label(index: int) -> str:
        return describe(items[index]) if describe is not None else f"item {index}"

    def feed(worker: _Worker) -> None:
        while pending:
            index = pending.popleft()
            if worker.give(index, (fn, items[index])):
                return
            pending.appendleft(index)  # already dead: its sentinel says so next
            return
        worker.stop()

    try:
        for worker in workers:
            feed(worker)
        while pending or any(w.index is not None for w in workers):
            watched = {w.conn: w for w in workers if not w.stopped or w.index is not None}
            watched.update({w.process.sentinel: w for w in workers if not w.stopped})
            for ready in wait(list(watched)):
                worker = watched[ready]
                if worker.index is None and worker.stopped:
                    continue
                outcome = None
                with contextlib.suppress(EOFError, OSError):
                    if worker.conn.poll():
                        outcome = worker.conn.recv()
                if outcome is None:
                    if worker.process.is_alive() and ready is worker.conn:
                        continue
                    pid = worker.process.pid
                    if worker.index is None:
                        raise RunError(f"worker process {pid} died between items (exit code "
                                       f"{worker.exitcode()}); the run stopped")
                    raise WorkerDiedError(label(worker.index), pid, worker.exitcode())
                index, worker.index = worker.index, None
                kind, value = outcome
                if kind == "error":
                    raise value
                if kind == "unsendable":
                    raise RunError(f"{label(index)}: {value}")
                feed(worker)
                if not ordered:
                    yield value
                    continue
                finished[index] = value
                while next_out in finished:
                    yield finished.pop(next_out)
                    next_out += 1
        # Joined, not terminated: a worker's last counts may still sit in its queue feeder
        # thread, which a worker that exits on its own flushes and a terminated one loses.
        for worker in workers:
            worker.process.join()
        clean = True
    finally:
        lost = [w.index for w in workers if w.index is not None]
        for worker in workers:
            worker.end()
        for index in lost:
            if cleanup is not None:
                try:
                    cleanup(items[index])
                except Exception as exc:  # noqa: BLE001 - the run's own error matters more
                    log.warning("%s: could not remove its partial outputs: %s", label(index), exc)
        if clean:
            progress_queue.put(_STOP)
        else:
            # A worker killed while writing to the queue may hold its lock for good: never wait on it.
            stop_drain.set()
            progress_queue.cancel_join_thread()
        drain.join(timeout=5)
