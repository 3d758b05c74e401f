"""Done markers: a small file that says a task finished, valid only for the same parameters.

Why tie a marker to a digest of the run's parameters: a rerun with other settings (another
tagger, another threshold, changed inputs) must redo the work instead of trusting outputs made
for different settings; the same rerun must redo nothing. A marker is written atomically after
every output it vouches for is in place, so one that exists vouches for complete outputs. Markers
may live in a folder or at a store URL (the tagging run's metadata folder can be remote).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
from dataclasses import dataclass
from typing import Any

import orjson

from feedline.io import atomic_write
from feedline.io.paths import is_url, local_path
from feedline.io.redact import redact_text
from feedline.io.small import read_small

__all__ = ["DoneMarker", "params_digest"]


def params_digest(params: Any) -> str:
    """A short stable digest of JSON-able parameters (key order does not matter)."""
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@dataclass(frozen=True)
class DoneMarker:
    """The marker at ``path`` (local path or store URL) for a run whose parameters digest to
    ``digest`` (:func:`params_digest`)."""

    path: str
    digest: str

    def read(self) -> dict[str, Any] | None:
        """What the finished task recorded, or None: no marker, an unreadable one, or one written
        under other parameters (all three mean "not done")."""
        data = read_small(self.path)
        if data is None:
            return None
        try:
            marker = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(marker, dict) or marker.get("params") != self.digest:
            return None
        return marker

    def write(self, **info: Any) -> dict[str, Any]:
        """Record the task as done (atomically), with ``info`` (counts, sizes ...); returns it."""
        marker = {
            "params": self.digest,
            # a source URL's user:password and query tokens never reach a file
            **{k: redact_text(v) if isinstance(v, str) else v for k, v in info.items()},
            "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        with atomic_write(self.path, "wb") as handle:
            handle.write(orjson.dumps(marker, option=orjson.OPT_SORT_KEYS) + b"\n")
        return marker

    def clear(self) -> None:
        """Forget the task (its output was removed since): the next run redoes it."""
        if is_url(self.path):
            raise ValueError(f"{self.path}: clearing a remote marker is not supported")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local_path(self.path))
