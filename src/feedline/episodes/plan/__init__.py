"""``feedline plan``: will a run's settings keep the GPU fed, within memory, with diverse batches?
Predicted from the sidecar, metadata and settings (``simulate`` replays the real schedule,
``costs`` measures this machine, ``model`` predicts), measured side by side (``measure``), and
drawn (``report``, ``plots``, ``trace``) from a run's stage events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "predict": "feedline.episodes.plan.model",
    "render": "feedline.episodes.plan.model",
    "RunRecorder": "feedline.episodes.plan.measure",
    "write_report": "feedline.episodes.plan.report",
    "write_trace": "feedline.episodes.plan.trace",
}

__all__ = ["RunRecorder", "predict", "render", "write_report", "write_trace"]

if TYPE_CHECKING:
    from feedline.episodes.plan.measure import RunRecorder
    from feedline.episodes.plan.model import predict, render
    from feedline.episodes.plan.report import write_report
    from feedline.episodes.plan.trace import write_trace

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
