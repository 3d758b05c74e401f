"""``feedline plan``: will a run's settings keep the GPU fed, within memory, with diverse batches?
Predicted from the sidecar, metadata and settings (``simulate`` replays the real schedule,
``costs`` measures this machine, ``model`` predicts), measured side by side (``measure``), and
drawn (``report``, ``plots``, ``trace``) from a run's stage events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "predict": "feedline.episodes.forecast.model",
    "render": "feedline.episodes.forecast.model",
    "RunRecorder": "feedline.episodes.forecast.measure",
    "write_report": "feedline.episodes.forecast.report",
    "write_trace": "feedline.episodes.forecast.trace",
}

__all__ = ["RunRecorder", "predict", "render", "write_report", "write_trace"]

if TYPE_CHECKING:
    from feedline.episodes.forecast.measure import RunRecorder
    from feedline.episodes.forecast.model import predict, render
    from feedline.episodes.forecast.report import write_report
    from feedline.episodes.forecast.trace import write_trace

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
