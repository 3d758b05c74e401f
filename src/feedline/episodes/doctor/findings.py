"""What ``feedline doctor`` found: one :class:`Finding` per problem, gathered in a :class:`Report`.

A finding says how bad it is (``error``: a reader fails or reads wrong data; ``warning``: data
wasted, slow or suspicious, but read correctly; ``info``: a measurement), which check raised it,
the file and episode it is about, what is wrong and what to do. The report adds how many bytes
the checks read, by kind, so a user sees that a remote dataset was examined without being
downloaded. Its JSON form is the machine-readable contract (``docs/doctor.md``); the exit code is
the number of errors, capped at 255 because a shell keeps only the low 8 bits.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

#: Every check's name and what it looks at (the ``check`` of a finding; docs/doctor.md explains each).
CHECKS = {
    "metadata": "meta/info.json and meta/episodes agree with themselves",
    "files": "files that are missing, zero bytes or truncated (Parquet footer, MP4 moov, sample ranges)",
    "frames": "frames in each container against the frames each episode implies",
    "timestamps": "from/to_timestamp against the encoded durations",
    "tolerance": "how far each frame is from the time the reader asks for (the tolerance_s needed)",
    "rows": "every episode's rows present in its data file",
    "orphans": "data rows and files no episode covers, videos no episode points at",
    "monotonic": "data timestamps increasing within each episode",
    "edit_list": "MP4 edit lists the reader rejects",
    "stats": "meta/stats.json present, complete and finite",
    "codec": "a local decoder for each video's codec",
    "keyframes": "keyframe interval and the random-access cost it implies",
}

#: Highest exit code a shell shows: ``$?`` keeps the low 8 bits, so 256 errors would read as 0.
MAX_EXIT_CODE = 255
#: Schema of :meth:`Report.to_json`; bumped when a key changes meaning or goes away.
REPORT_VERSION = 1


@dataclass(frozen=True)
class Finding:
    """One problem (or measurement) in a dataset.

    Args:
        severity: ``error``, ``warning`` or ``info``.
        check: which check raised it (a key of :data:`CHECKS`).
        file: the file it is about, relative to the dataset root; ``None`` for the whole dataset.
        episode: the episode it is about; ``None`` when it is about a file or the dataset.
        problem: what is wrong (or what was measured).
        fix: what to do about it.
    """

    severity: str
    check: str
    file: str | None
    episode: int | None
    problem: str
    fix: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES or self.check not in CHECKS:
            raise ValueError(f"finding of unknown severity {self.severity!r} or check {self.check!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Findings:
    """The findings of one run, added from any thread (videos are indexed in parallel)."""

    def __init__(self) -> None:
        self._items: list[Finding] = []
        self._lock = threading.Lock()

    def add(
        self, severity: str, check: str, file: str | None, episode: int | None, problem: str, fix: str
    ) -> Finding:
        finding = Finding(severity, check, file, None if episode is None else int(episode), problem, fix)
        with self._lock:
            self._items.append(finding)
        return finding

    def error(self, check: str, file: str | None, episode: int | None, problem: str, fix: str) -> Finding:
        return self.add(ERROR, check, file, episode, problem, fix)

    def warning(self, check: str, file: str | None, episode: int | None, problem: str, fix: str) -> Finding:
        return self.add(WARNING, check, file, episode, problem, fix)

    def info(self, check: str, file: str | None, episode: int | None, problem: str, fix: str = "") -> Finding:
        return self.add(INFO, check, file, episode, problem, fix)

    def sorted(self) -> list[Finding]:
        """Errors first, then warnings, then info; within one, by file and episode."""
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        with self._lock:
            items = list(self._items)
        return sorted(
            items,
            key=lambda f: (rank[f.severity], f.file or "", -1 if f.episode is None else f.episode, f.check),
        )


@dataclass
class Report:
    """Everything one ``feedline doctor`` run found and what it cost.

    Args:
        root: the dataset root examined (credential-free URL or path).
        findings: every finding, errors first.
        bytes_read: bytes read, by kind (``metadata``, ``parquet_footers``, ``parquet_columns``,
            ``mp4_index``), and ``total``.
        requests: read requests sent (ranged reads, whole small files).
        dataset: what was examined: episodes, frames, cameras, data and video files and their bytes.
        checked: per check, whether it ran (``True``) or why not (a sentence).
    """

    root: str
    findings: list[Finding]
    bytes_read: dict[str, int]
    requests: int
    dataset: dict[str, int]
    checked: dict[str, Any] = field(default_factory=dict)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> int:
        return self.count(ERROR)

    @property
    def exit_code(self) -> int:
        """The number of errors, at most :data:`MAX_EXIT_CODE` (0: no error, the dataset reads)."""
        return min(self.errors, MAX_EXIT_CODE)

    def summary(self) -> dict[str, int]:
        return {"errors": self.errors, "warnings": self.count(WARNING), "info": self.count(INFO)}

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report (schema :data:`REPORT_VERSION`, described in docs/doctor.md)."""
        return {
            "format": "feedline-doctor",
            "version": REPORT_VERSION,
            "root": self.root,
            "summary": self.summary(),
            "exit_code": self.exit_code,
            "bytes_read": dict(self.bytes_read),
            "requests": self.requests,
            "dataset": dict(self.dataset),
            "checked": dict(self.checked),
            "findings": [f.to_json() for f in self.findings],
        }
