"""Run progress: a tqdm bar on a TTY, a log line every few seconds otherwise.

Workers send counts in batches (every N documents or T seconds, see ``TagJob``); when the queue
backs up, a worker doubles its own interval, so progress never costs more than the work.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

log = logging.getLogger("feedline.curate")


class Progress:
    """Files and documents done, shown as a bar (TTY) or periodic log lines."""

    def __init__(self, total_files: int, what: str = "tag", log_every_s: float = 10.0) -> None:
        self.total_files = total_files
        self.what = what
        self.files = 0
        self.documents = 0
        self.started = time.monotonic()
        self._last_log = self.started
        self.log_every_s = log_every_s
        self._bar: Any = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total_files, unit="file", desc=what, dynamic_ncols=True)

    def add(self, files: int = 0, documents: int = 0) -> None:
        self.files += files
        self.documents += documents
        if self._bar is not None:
            if files:
                self._bar.update(files)
            self._bar.set_postfix_str(f"{self.documents:,} docs", refresh=False)
            return
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            rate = self.documents / max(now - self.started, 1e-9)
            log.info("%s: %d/%d files, %s documents (%.0f docs/s)", self.what, self.files, self.total_files,
                     f"{self.documents:,}", rate)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class DocProgress:
    """Documents done and their rate (``doc/s``): a tqdm bar on a TTY, log lines otherwise.

    The mixer's total is not known up front (counting lines would cost a second pass), so the
    bar shows the count and the rate, with files (or streams) done in its postfix.
    """

    def __init__(self, what: str, total_files: int, unit_files: str = "files", enabled: bool | None = None,
                 log_every_s: float = 10.0) -> None:
        self.what = what
        self.total_files = total_files
        self.unit_files = unit_files
        self.files = 0
        self.documents = 0
        self.started = time.monotonic()
        self._last_log = self.started
        self.log_every_s = log_every_s
        self._bar: Any = None
        if sys.stderr.isatty() if enabled is None else enabled:
            from tqdm import tqdm

            self._bar = tqdm(unit="doc", unit_scale=True, desc=what, dynamic_ncols=True, mininterval=0.2,
                             file=sys.stderr)
            self._bar.set_postfix_str(self._postfix(), refresh=False)

    def _postfix(self) -> str:
        return f"{self.files}/{self.total_files} {self.unit_files}"

    def add(self, files: int = 0, documents: int = 0) -> None:
        self.files += files
        self.documents += documents
        if self._bar is not None:
            if files:
                self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(documents)
            return
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            rate = self.documents / max(now - self.started, 1e-9)
            log.info("%s: %s documents (%.0f docs/s), %s", self.what, f"{self.documents:,}", rate, self._postfix())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.close()
