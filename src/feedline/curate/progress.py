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
    """Files and documents done, shown as a bar of files (TTY) or periodic log lines.

    Args:
        total_files: files (or streams) the run will finish.
        what: the bar's and the log line's label.
        unit_files: what ``total_files`` counts, for the display.
        enabled: show a bar; default: when stderr is a terminal.
        log_every_s: seconds between log lines when there is no bar.
    """

    def __init__(self, total_files: int, what: str = "tag", *, unit_files: str = "files",
                 enabled: bool | None = None, log_every_s: float = 10.0) -> None:
        self.total_files = total_files
        self.what = what
        self.unit_files = unit_files
        self.files = 0
        self.documents = 0
        self.started = time.monotonic()
        self._last_log = self.started
        self.log_every_s = log_every_s
        self._bar: Any = self._make_bar() if (sys.stderr.isatty() if enabled is None else enabled) else None

    def _make_bar(self) -> Any:
        from tqdm import tqdm

        return tqdm(total=self.total_files, unit="file", desc=self.what, dynamic_ncols=True)

    def _files_done(self) -> str:
        return f"{self.files}/{self.total_files} {self.unit_files}"

    def _show(self, files: int, documents: int) -> None:
        if files:
            self._bar.update(files)
        self._bar.set_postfix_str(f"{self.documents:,} docs", refresh=False)

    def add(self, files: int = 0, documents: int = 0) -> None:
        self.files += files
        self.documents += documents
        if self._bar is not None:
            self._show(files, documents)
            return
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            rate = self.documents / max(now - self.started, 1e-9)
            log.info("%s: %s, %s documents (%.0f docs/s)", self.what, self._files_done(),
                     f"{self.documents:,}", rate)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class DocProgress(Progress):
    """Documents done and their rate (``doc/s``), files (or streams) done in the bar's postfix.

    The mixer's total is not known up front (counting lines would cost a second pass), so the
    bar shows the count and the rate rather than a share.
    """

    def __init__(self, what: str, total_files: int, unit_files: str = "files", enabled: bool | None = None,
                 log_every_s: float = 10.0) -> None:
        super().__init__(total_files, what, unit_files=unit_files, enabled=enabled, log_every_s=log_every_s)

    def _make_bar(self) -> Any:
        from tqdm import tqdm

        bar = tqdm(unit="doc", unit_scale=True, desc=self.what, dynamic_ncols=True, mininterval=0.2,
                   file=sys.stderr)
        bar.set_postfix_str(self._files_done(), refresh=False)
        return bar

    def _show(self, files: int, documents: int) -> None:
        if files:
            self._bar.set_postfix_str(self._files_done(), refresh=False)
        self._bar.update(documents)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._files_done(), refresh=False)
        super().close()
