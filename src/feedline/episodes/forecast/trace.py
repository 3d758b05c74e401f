"""A recorded run as a Chrome / Perfetto trace (the JSON trace-event format): open it in
ui.perfetto.dev or chrome://tracing.

One process per DataLoader worker (and the training process), one track per thread: ``fetch``
spans on the fetch threads, ``decode`` on the decode threads, ``take`` (the worker waiting for its
next sample), ``worker_batch`` and ``assemble`` (the collate) on the worker's own thread, and
``batch wait`` / ``step`` on the training loop's; counters ``bytes`` (reserved and in flight per
worker). Times are microseconds from the run's start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from feedline.episodes.forecast.timeline import timeline
from feedline.io.atomic import atomic_write

__all__ = ["trace_events", "write_trace"]

_LOOP_PID = 0
_US = 1e6


def trace_events(recorder: Any) -> dict[str, Any]:
    """The trace of ``recorder``'s run as a trace-event JSON object."""
    run = timeline(recorder)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _LOOP_PID, "args": {"name": "training loop"}},
    ]
    for pid, worker in run.workers.items():
        name = "in-process reader" if worker is None else f"DataLoader worker {worker}"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
    for span in run.spans:
        args = {k: v for k, v in span["args"].items() if k != "key"}
        events.append({"ph": "X", "name": span["name"], "cat": "reader", "pid": span["pid"],
                       "tid": span["thread"], "ts": _US * span["start"],
                       "dur": _US * max(0.0, span["end"] - span["start"]), "args": args})
    for pid, values in run.counters.items():
        for at, reserved, resident in values:
            events.append({"ph": "C", "name": "bytes", "pid": pid, "ts": _US * at,
                           "args": {"reserved": reserved, "in flight": reserved - resident}})
    for b in run.batches:
        start = b["at"] - b["wait"]
        events.append({"ph": "X", "name": "batch wait", "cat": "loop", "pid": _LOOP_PID, "tid": 1,
                       "ts": _US * start, "dur": _US * b["wait"],
                       "args": {s: round(b[s], 6) for s in ("fetch", "decode", "assemble")}})
        if b["consumer"] > 0:
            events.append({"ph": "X", "name": "step", "cat": "loop", "pid": _LOOP_PID, "tid": 1,
                           "ts": _US * b["at"], "dur": _US * b["consumer"]})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(recorder: Any, path: str | os.PathLike[str]) -> Path:
    """Write the trace of ``recorder``'s run to ``path`` (atomically)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target, "w", encoding="utf-8") as handle:
        json.dump(trace_events(recorder), handle)
    return target
