"""feedline.run: the machinery every batch job shares, below the parts and above ``io``.

Tagging, mixing, dedup (both executors), download and build-sidecar all need the same few things:
a progress reporter that suits a terminal and a log, a spawn pool that reports progress and dies
with its parent, a Ray driver loop that cancels on failure and skips finished tasks, a done marker
tied to the run's parameters, and one retry policy. They live here once, so no part grows its own
copy and the import rule (no part imports a sibling) costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "DoneMarker": "feedline.run.markers",
    "params_digest": "feedline.run.markers",
    "Progress": "feedline.run.progress",
    "human_bytes": "feedline.run.progress",
    "pool_map": "feedline.run.pool",
    "ray_map": "feedline.run.ray_driver",
    "ray_session": "feedline.run.ray_driver",
    "TASK_RETRY": "feedline.run.retry",
    "pause_before_retry": "feedline.run.retry",
    "RunError": "feedline.run.errors",
    "WorkerDiedError": "feedline.run.errors",
}

__all__ = [
    "DoneMarker",
    "Progress",
    "RunError",
    "TASK_RETRY",
    "WorkerDiedError",
    "human_bytes",
    "params_digest",
    "pause_before_retry",
    "pool_map",
    "ray_map",
    "ray_session",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from feedline.run.errors import RunError, WorkerDiedError
    from feedline.run.markers import DoneMarker, params_digest
    from feedline.run.pool import pool_map
    from feedline.run.progress import Progress, human_bytes
    from feedline.run.ray_driver import ray_map, ray_session
    from feedline.run.retry import TASK_RETRY, pause_before_retry
