"""``feedline doctor``: is a LeRobot v3 dataset sound? Checked from its metadata, Parquet footers
and MP4 indexes, never its video payload: ``metadata`` → ``inventory`` → ``data`` → ``video`` +
``spans``, counted by ``reads``, gathered as ``findings`` by ``runner``, printed by ``cli``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "Finding": "feedline.episodes.doctor.findings",
    "Report": "feedline.episodes.doctor.findings",
    "run_doctor": "feedline.episodes.doctor.runner",
}

__all__ = ["Finding", "Report", "run_doctor"]

if TYPE_CHECKING:
    from feedline.episodes.doctor.findings import Finding, Report
    from feedline.episodes.doctor.runner import run_doctor

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
