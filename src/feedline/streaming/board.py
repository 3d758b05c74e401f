"""The memory a streaming dataset shares with its DataLoader workers: control and metrics.

Two blocks, one owner (:class:`WorkerBoard`):

* **control**, written by the training process before every ``iter(loader)`` and read by each
  worker when its pass starts: the epoch, every worker's resume offset and the epoch's earlier
  topologies (an elastic resume's history), so persistent workers (which keep their copy of the
  dataset from the first epoch) follow epochs and resumes too;
* **metrics**, one row per process (the training process, then DataLoader worker ids), each
  written by one process only, so no lock (a lock would tie the arrays to one multiprocessing
  start method). Rows are summed, peaks (``peak_*``) are maxima. The counters are the fields of
  :class:`~feedline.streaming.pipeline.PipelineMetrics` and of the counter dataclasses the
  reader registers (the episode reader's decoded-frame counters), not their levels, so a counter
  added there is shared and reported without another list to keep in step; seconds travel as
  microseconds.

The arrays travel only to spawned or forked workers; pickled any other way a board starts empty.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.context as mp_context
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

import numpy as np

from feedline.streaming.pipeline import PipelineMetrics
from feedline.streaming.schedule.elastic import MAX_STAGES
from feedline.streaming.schedule.resume import ResumePosition

__all__ = ["COUNTERS", "WorkerBoard", "counter_names"]

def counter_names(classes: Sequence[type]) -> tuple[str, ...]:
    """The shared counters of ``classes`` (dataclasses), by field name, levels left out."""
    return tuple(
        f.name for cls in classes for f in fields(cls) if not f.metadata.get("level")
    )


#: The counters every board shares: the pipeline's own.
COUNTERS: tuple[str, ...] = counter_names((PipelineMetrics,))
_ROWS = 64
_EPOCH, _SET, _OFFSETS = 0, 1, 2  # control: epoch, 1 + rotation when set, offsets count, offsets
_HISTORY = _OFFSETS + _ROWS + 1  # then: stages count, MAX_STAGES stages of _STAGE integers
_STAGE = 6  # Stage.to_list()


class WorkerBoard:
    """The control block and the metrics rows of one dataset (see the module docstring).

    Args:
        counters: the reader's own counter dataclasses, shared beside the pipeline's
            (:class:`~feedline.streaming.pipeline.PipelineMetrics`). Default none.
    """

    def __init__(self, counters: Sequence[type] = ()) -> None:
        self._classes = (PipelineMetrics, *counters)
        self._names = counter_names(self._classes)
        self._seconds = frozenset(
            f.name for cls in self._classes for f in fields(cls) if isinstance(f.default, float)
        )
        self._peaks = frozenset(i for i, name in enumerate(self._names) if name.startswith("peak_"))
        self._metrics = mp.RawArray("q", _ROWS * len(self._names))
        self._control = mp.RawArray("q", _HISTORY + 1 + MAX_STAGES * _STAGE)

    # ---- control ----------------------------------------------------------------------------

    def write_control(self, epoch: int, position: ResumePosition | None) -> None:
        """Tell the workers (persistent ones too) the epoch and offsets their next pass serves."""
        control = self._control
        offsets = () if position is None or position.epoch != epoch else position.worker_offsets
        control[_EPOCH] = epoch
        control[_OFFSETS] = len(offsets)
        control[_OFFSETS + 1 : _OFFSETS + 1 + len(offsets)] = list(offsets)
        history = position.history if offsets and position is not None else ()
        control[_HISTORY] = len(history)
        flat = [int(v) for stage in history for v in stage]
        control[_HISTORY + 1 : _HISTORY + 1 + len(flat)] = flat
        control[_SET] = 1 + (position.worker_rotation if offsets and position else 0)

    def read_control(self) -> ResumePosition | None:
        """What the training process published for this pass (``None``: nothing yet)."""
        control = self._control
        if not control[_SET]:
            return None
        parts = control[_OFFSETS]
        offsets = tuple(control[_OFFSETS + 1 : _OFFSETS + 1 + parts])
        flat = control[_HISTORY + 1 : _HISTORY + 1 + control[_HISTORY] * _STAGE]
        history = tuple(tuple(flat[i : i + _STAGE]) for i in range(0, len(flat), _STAGE))
        return ResumePosition(control[_EPOCH], 0, offsets, True, worker_rotation=control[_SET] - 1,
                              history=history)

    # ---- metrics ----------------------------------------------------------------------------

    def publish(self, row: int, published: dict[str, int], *counters: Any) -> None:
        """Add to ``row`` what ``counters`` counted since the last call (``published``)."""
        current: dict[str, int] = {}
        for counter in counters:
            for name, value in asdict(counter).items():
                current[name] = int(value * 1e6) if name in self._seconds else value
        base = (row % _ROWS) * len(self._names)
        shared = self._metrics
        for i, name in enumerate(self._names):
            if name not in current:
                continue
            if i in self._peaks:
                shared[base + i] = max(shared[base + i], current[name])
            else:
                shared[base + i] += current[name] - published.get(name, 0)
        published.update(current)

    def totals(self) -> dict[str, Any]:
        """Every counter over every row: sums, peaks as maxima, seconds as seconds."""
        rows = np.asarray(self._metrics[:], dtype=np.int64).reshape(_ROWS, len(self._names))
        out: dict[str, Any] = {}
        for i, name in enumerate(self._names):
            value = int(rows[:, i].max() if i in self._peaks else rows[:, i].sum())
            out[name] = value / 1e6 if name in self._seconds else value
        return out

    def reset_metrics(self) -> None:
        """Zero every metrics row."""
        self._metrics[:] = [0] * (_ROWS * len(self._names))

    # ---- pickling -----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        spawning = mp_context.get_spawning_popen() is not None
        return {"arrays": (self._metrics, self._control) if spawning else None,
                "counters": self._classes[1:]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["counters"])  # type: ignore[misc]
        if state["arrays"] is not None:
            self._metrics, self._control = state["arrays"]
