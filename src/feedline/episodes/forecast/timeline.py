"""A recorded run as the report and the trace read it: batches with where their wait went, the
workers' byte counters, and every stage span, on one clock from the run's start.

Where a batch's wait went: the training process only sees how long ``next(loader)`` took. The
worker that made the batch recorded, for the same batch (tied by its first sample's key), how
long it waited on fetches (refill stalls), on decodes (the rest of its takes) and how long the
collate took. The wait is split in those proportions; what the loop did between batches (the
training step) is the ``consumer`` time. A batch that came with no wait needs no split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.episodes.stream.events import read_events

__all__ = ["STAGES", "Timeline", "timeline"]

STAGES = ("fetch", "decode", "assemble", "consumer")


@dataclass
class Timeline:
    """One recorded run (see the module docstring); times in seconds from its start.

    Args:
        start: the run's start on the monotonic clock.
        batches: per batch taken: when, its wait split by stage, the loop's time, its episodes.
        counters: per process, (time, bytes reserved, bytes resident) samples.
        spans: every stage span (name, start, end, process, thread, args).
        workers: per process, its DataLoader worker id (``None``: in process).
    """

    start: float
    batches: list[dict[str, Any]]
    counters: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)
    workers: dict[int, int | None] = field(default_factory=dict)

    @property
    def waits(self) -> np.ndarray:
        return np.asarray([b["wait"] for b in self.batches], dtype=np.float64)

    def stage_totals(self) -> dict[str, float]:
        return {s: float(sum(b[s] for b in self.batches)) for s in STAGES}


def timeline(recorder: Any) -> Timeline:
    """The :class:`Timeline` of a :class:`~feedline.episodes.forecast.measure.RunRecorder`'s run."""
    start = recorder.started if recorder.started is not None else 0.0
    made: dict[tuple[int, ...], dict[str, float]] = {}
    counters: dict[int, list[tuple[float, float, float]]] = {}
    spans: list[dict[str, Any]] = []
    workers: dict[int, int | None] = {}
    for file in read_events(recorder.log.directory):
        pid = int(file["pid"])
        workers[pid] = file.get("worker")
        for kind, name, t0, t1, thread, args in file["events"]:
            if kind == "C":
                counters.setdefault(pid, []).append(
                    (t0 - start, float(args["reserved"]), float(args["resident"])))
                continue
            spans.append({"name": name, "start": t0 - start, "end": t1 - start, "pid": pid,
                          "thread": thread, "args": args})
            if name == "worker_batch":
                entry = made.setdefault(tuple(args["key"]), {})
                entry["fetch"] = entry.get("fetch", 0.0) + float(args["fetch"])
                entry["decode"] = entry.get("decode", 0.0) + float(args["decode"])
            elif name == "assemble":
                entry = made.setdefault(tuple(args["key"]), {})
                entry["assemble"] = entry.get("assemble", 0.0) + (t1 - t0)
    batches = []
    recorded = recorder.batches
    for i, b in enumerate(recorded):
        wait = b["got"] - b["asked"]
        after = recorded[i + 1]["asked"] - b["got"] if i + 1 < len(recorded) else 0.0
        parts = made.get(tuple(b["key"]) if b["key"] else (), {})
        work = {s: float(parts.get(s, 0.0)) for s in ("fetch", "decode", "assemble")}
        total = sum(work.values())
        split = {s: wait * v / total for s, v in work.items()} if total > 0 else {
            "fetch": 0.0, "decode": wait, "assemble": 0.0}
        batches.append({"at": b["got"] - start, "wait": wait, "consumer": max(0.0, after),
                        "episodes": b["episodes"], "ids": b.get("ids", []), "size": b["size"],
                        **split})
    for values in counters.values():
        values.sort()
    spans.sort(key=lambda s: s["start"])
    return Timeline(start, batches, counters, spans, workers)
