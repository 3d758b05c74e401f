"""Progress of a long job: a tqdm bar on a terminal, a log line every few seconds otherwise.

One reporter for every long command (tag, mix, dedup, download, build-sidecar) so they all show
the same things: what is done toward the total, the rate, the ETA, and any side counts (the
documents beside the files). Under a batch scheduler there is no terminal, so the same figures go
to the ``feedline.progress`` logger, which the command shows at its default verbosity; a short
run prints nothing there, a long one ends with a summary line.

Counts arrive from many threads (download threads, a pool's drain thread), so updates take a lock.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["LOGGER_NAME", "Progress", "human_bytes"]

LOGGER_NAME = "feedline.progress"
log = logging.getLogger(LOGGER_NAME)


def human_bytes(n: float, digits: int = 1) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``, ... (the binary units tqdm's bar shows); error
    messages that compare two sizes ask for more ``digits``. feedline's one byte formatter."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{digits}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def clock(seconds: float) -> str:
    """``0:00:49``, ``1:02:03``: an ETA as tqdm shows one."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class Progress:
    """Work done toward ``total`` in ``unit`` s, plus named side counters.

    Args:
        what: the label of the bar and of each log line (``"tag"``, ``"dedup signatures"``).
        total: the amount the job will finish; None when not known up front (the mixer cannot
            know its documents without a second pass), or grown later with :meth:`add_total`.
        unit: what the main count counts; ``"B"`` shows binary-scaled bytes.
        initial: already done before this run (a resumed download, reused tasks).
        counters: side counters shown beside the main one, name -> its total (or None).
        scale: the bar shows the main count with k/M/G prefixes (``4.50kdoc``), for counts
            that reach millions (documents); bytes always are scaled.
        enabled: show a bar; default: when stderr is a terminal.
        log_every_s: seconds between log lines when there is no bar.
    """

    def __init__(
        self,
        what: str,
        *,
        total: int | None = None,
        unit: str = "item",
        initial: int = 0,
        counters: Mapping[str, int | None] | None = None,
        scale: bool = False,
        enabled: bool | None = None,
        log_every_s: float = 10.0,
    ) -> None:
        self.what = what
        self.total = total
        self.unit = unit
        self.done = initial
        self.received = 0  # counted now, the only amount the rate is computed from
        self.counts = {name: 0 for name in counters or {}}
        self.count_totals = dict(counters or {})
        self.started = time.monotonic()
        self.log_every_s = log_every_s
        self._last_log = self.started
        self._logged = False
        self._lock = threading.Lock()
        self._bar: Any = None
        if sys.stderr.isatty() if enabled is None else enabled:
            from tqdm import tqdm

            scaling = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {"unit_scale": scale}
            self._bar = tqdm(total=total, initial=initial, unit=unit, desc=what, dynamic_ncols=True,
                             mininterval=0.2, file=sys.stderr, **scaling)
            if self.counts:
                self._bar.set_postfix_str(self._side(), refresh=False)

    # -- counting ----------------------------------------------------------------------------
    def update(self, n: int = 1, **side: int) -> None:
        """``n`` more done now (counted in the rate), and side counters moved by ``side``."""
        with self._lock:
            self.done += n
            self.received += n
            for name, k in side.items():
                self.counts[name] = self.counts.get(name, 0) + k
            if self._bar is not None:
                if side:
                    self._bar.set_postfix_str(self._side(), refresh=False)
                self._bar.update(n)
                return
            self._maybe_log()

    def count(self, **side: int) -> None:
        """Move side counters only (documents while a file is still being tagged)."""
        self.update(0, **side)

    def adjust(self, n: int) -> None:
        """Count ``n`` more (or fewer) done without their having been done now: kept from an
        earlier run, or thrown away by a restart. The rate and the ETA stay this run's."""
        if not n:
            return
        with self._lock:
            self.done += n
            if self._bar is not None:
                # Moved together, n and initial keep tqdm's average rate (n - initial) / elapsed,
                # and last_print_n keeps the jump out of its smoothed rate.
                self._bar.n += n
                self._bar.initial += n
                self._bar.last_print_n += n
                self._bar.refresh()

    def add_total(self, n: int) -> None:
        """The total grows by ``n`` (a shard whose size was unknown at the start)."""
        with self._lock:
            self.total = (self.total or 0) + n
            if self._bar is not None:
                self._bar.total = self.total
                self._bar.refresh()

    # -- showing -----------------------------------------------------------------------------
    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "B" else f"{int(n):,} {self.unit}"

    def _rate(self, per_s: float) -> str:
        return f"{human_bytes(per_s)}/s" if self.unit == "B" else f"{per_s:,.0f} {self.unit}/s"

    def _side(self) -> str:
        parts = []
        for name, value in self.counts.items():
            total = self.count_totals.get(name)
            parts.append(f"{value:,}/{total:,} {name}" if total is not None else f"{value:,} {name}")
        return ", ".join(parts)

    def status(self, now: float | None = None) -> str:
        """``1.5 GiB of 4.0 GiB (37%), 52.3 MiB/s, ETA 0:00:49; 120 documents`` (what is known)."""
        now = time.monotonic() if now is None else now
        per_s = self.received / max(now - self.started, 1e-9)
        if self.total:
            left = max(self.total - self.done, 0)
            eta = "?" if per_s <= 0 else clock(left / per_s)
            text = (f"{self._amount(self.done)} of {self._amount(self.total)} "
                    f"({100 * self.done / self.total:.0f}%), {self._rate(per_s)}, ETA {eta}")
        else:
            text = f"{self._amount(self.done)} so far, {self._rate(per_s)}"
        side = self._side()
        return f"{text}; {side}" if side else text

    def _maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            self._logged = True
            log.info("%s: %s", self.what, self.status(now))

    def close(self) -> None:
        """Close the bar; a run long enough to have logged its progress logs a summary too."""
        if self._bar is not None:
            if self.counts:
                self._bar.set_postfix_str(self._side(), refresh=False)
            self._bar.close()
            self._bar = None
            return
        if self._logged:
            seconds = max(time.monotonic() - self.started, 1e-9)
            kept = self.done - self.received
            side = self._side()
            log.info("%s: %s in %.1f s (%s)%s%s", self.what, self._amount(self.received), seconds,
                     self._rate(self.received / seconds),
                     f", {self._amount(kept)} kept from earlier runs" if kept > 0 else "",
                     f"; {side}" if side else "")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
