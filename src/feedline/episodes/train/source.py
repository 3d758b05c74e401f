"""Where ``feedline train`` reads from, checked within seconds before anything slow starts.

A reader pointed at an unreachable endpoint would otherwise spend its retries (about a minute on
S3) before a bare connection error, after LeRobot's imports. :func:`check_source` reads the stat of
``meta/info.json`` on a thread and gives up after :data:`CHECK_TIMEOUT_S`, so an unreachable
root, a missing dataset or refused credentials is one line within 10 s of the command's start.
It imports only :mod:`feedline.io` (no torch, no LeRobot).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from feedline.episodes.errors import TrainError
from feedline.io import open_store
from feedline.io.errors import AccessDeniedError, NotFoundError
from feedline.io.redact import redact_url
from feedline.io.retry import quiet_outages

__all__ = ["CHECK_TIMEOUT_S", "check_source", "source_url"]

#: Seconds the first metadata read may take. The command must answer within 10 s, and Python's
#: start plus feedline's imports take about 1 s on a busy 2-core machine.
CHECK_TIMEOUT_S = 5.0

INFO_PATH = "meta/info.json"


def source_url(
    repo_id: str | None, root: str | None, repo_type: str = "dataset", revision: str | None = None
) -> str | None:
    """The URL the reader opens (``root``, else the Hub location of ``repo_id``), as
    :func:`feedline.episodes.base.resolve_root` resolves it; ``None`` when it cannot tell (the
    reader then names the problem)."""
    if root:
        return root
    if not repo_id or repo_id.count("/") != 1:
        return None
    if repo_type == "bucket":
        return f"hf://buckets/{repo_id}"
    return f"hf://datasets/{repo_id}" + (f"@{revision}" if revision else "")


def check_source(
    url: str, storage_options: Mapping[str, Any] | None = None, timeout_s: float = CHECK_TIMEOUT_S
) -> None:
    """Raise :class:`TrainError` unless ``url`` answers with a ``meta/info.json`` within ``timeout_s``."""
    shown = redact_url(url) if "://" in url else url
    outcome: dict[str, BaseException | None] = {}

    def stat() -> None:
        try:
            with quiet_outages():  # this check reports a dead endpoint itself, in one line
                store = open_store(url, **dict(storage_options or {}))
                store.set_outage_s(timeout_s)  # and stops retrying when it gives up waiting
                store.stat(INFO_PATH)
            outcome["error"] = None
        except BaseException as exc:  # reported on the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=stat, name="feedline-source-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "error" not in outcome:
        raise TrainError(
            f"{shown}: no answer within {timeout_s:.0f} s reading {INFO_PATH}; check the URL, the "
            "endpoint (AWS_ENDPOINT_URL or --dataset.storage_options) and network access"
        )
    error = outcome["error"]
    if error is None:
        return
    if isinstance(error, NotFoundError):
        raise TrainError(
            f"{shown}: no LeRobot dataset there ({INFO_PATH} not found); check --dataset.root "
            "or --dataset.repo_id"
        ) from None
    if isinstance(error, AccessDeniedError):
        raise TrainError(
            f"{shown}: access denied reading {INFO_PATH}; make credentials available (HF token, "
            "AWS_* variables or --dataset.storage_options)"
        ) from None
    first_line = (str(error).strip().splitlines() or [""])[0]
    raise TrainError(f"{shown}: cannot read {INFO_PATH} ({type(error).__name__}: {first_line})") from None
