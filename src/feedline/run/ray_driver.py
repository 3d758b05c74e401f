"""One Ray driver loop: submit the tasks not already done, collect them as they finish, cancel
the rest when one fails.

Why here: tagging and staged dedup both run file-to-file tasks on a cluster, and both must stop
submitting work for a run that has already failed, skip tasks whose done marker is valid, and say
how far they are. Ray retries tasks whose worker died (system failures) by itself; an application
error comes back once, to the caller's ``on_error``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from feedline.errors import FeedlineError
from feedline.run.errors import RunError
from feedline.run.progress import Progress

__all__ = ["import_ray", "ray_map", "ray_session"]


def import_ray(error: type[FeedlineError] = RunError) -> Any:
    """Ray, or a one-line ``error`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise error("--executor ray needs Ray: pip install 'feedline[ray]'") from None
    return ray


@contextlib.contextmanager
def ray_session(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    shutdown: bool = True,
    error: type[FeedlineError] = RunError,
) -> Iterator[Any]:
    """Ray, initialised for this job unless it already is: ``address`` joins a cluster; without
    one, a local instance (``num_cpus`` of them, no dashboard to pay for). An instance this
    started is shut down at the end when ``shutdown``."""
    ray = import_ray(error)
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["include_dashboard"] = False
            if num_cpus:
                kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
        started = True
    try:
        yield ray
    finally:
        if started and shutdown:
            ray.shutdown()


def ray_map(
    ray: Any,
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    *,
    skip: Collection[int] = (),
    progress: Progress | None = None,
    on_error: Callable[[int, Exception], Any] | None = None,
    **remote_options: Any,
) -> Iterator[tuple[int, Any]]:
    """``fn(*calls[i])`` as Ray tasks for every ``i`` not in ``skip``; yields ``(i, result)`` as
    each finishes.

    A task that raised is handed to ``on_error(i, exc)``, whose return value is yielded as its
    result; without ``on_error`` the exception propagates. Either way, leaving the loop early
    (``break``, an exception) cancels every task still pending. ``skip`` holds the tasks whose
    done marker is valid: they are not submitted and count as done on ``progress`` from the start.
    ``remote_options`` go to ``ray.remote`` (default ``num_cpus=1``).
    """
    remote = ray.remote(**{"num_cpus": 1, **remote_options})(fn)
    pending = {remote.remote(*args): i for i, args in enumerate(calls) if i not in skip}
    if progress is not None:
        progress.adjust(len(calls) - len(pending))
    waiting = list(pending)
    try:
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            index = pending[ready[0]]
            try:
                result = ray.get(ready[0])
            except Exception as exc:
                if on_error is None:
                    raise
                result = on_error(index, exc)
            if progress is not None:
                progress.update(1)
            yield index, result
    finally:
        for ref in waiting:
            ray.cancel(ref)
