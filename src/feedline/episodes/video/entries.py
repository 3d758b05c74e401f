"""A sidecar's ``meta.json`` entries, read as the untrusted JSON they are.

Why a module of its own: what a damaged archive may hold is any JSON at all, and turning each
wrong shape into a ``ValueError`` here lets the archive reader catch only the faults of a file
(never a ``TypeError`` of feedline's own, which is a bug and surfaces as one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feedline.episodes.video.mp4.table import INT_COLUMNS, TrackInfo

__all__ = ["VideoEntry", "check_members", "video_entries"]


@dataclass(frozen=True)
class VideoEntry:
    """One indexed video file inside a sidecar.

    Args:
        path: the MP4, relative to the dataset root.
        key: prefix of its arrays in the archive (``s<i>``).
        size: its size in bytes when indexed.
        fingerprint: the store's content identity when indexed (ETag, hash); ``None`` when the
            store has none (then the entry is never trusted from a published archive).
        samples: video samples indexed.
        info: the track's codec configuration, timescale and edit list.
    """

    path: str
    key: str
    size: int
    fingerprint: str | None
    samples: int
    info: TrackInfo


def video_entries(videos: Any) -> dict[str, VideoEntry]:
    """The ``videos`` list of ``meta.json``; JSON of the wrong shape is damage (a ValueError)."""
    if not isinstance(videos, list):
        raise ValueError(f"videos is a {type(videos).__name__}, not a list")
    entries = {}
    for s in videos:
        if not isinstance(s, dict) or not isinstance(s.get("info"), dict):
            raise ValueError(f"video entry {s!r:.80} is not an object with an info object")
        try:
            entry = _video_entry(s)
        except (TypeError, AttributeError, IndexError) as exc:  # a field of the wrong JSON type
            raise ValueError(f"video entry {s.get('path')!r:.80}: {exc}") from None
        entries[entry.path] = entry
    return entries


def _video_entry(s: dict[str, Any]) -> VideoEntry:
    fingerprint = s["fingerprint"]
    if not isinstance(s["path"], str) or not isinstance(s["key"], str) or not s["key"].startswith("s"):
        raise ValueError(f"video entry {s!r:.80} has no path/key")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError(f"{s['path']}: fingerprint {fingerprint!r} is not a string")
    size, samples = s["size"], s["samples"]
    for name, value in (("size", size), ("samples", samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{s['path']}: {name} {value!r} is not a count")
    info = s["info"]
    for name in ("width", "height", "timescale", "movie_timescale"):
        value = info[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{s['path']}: {name} {value!r} is not an integer")
    if info["timescale"] == 0:
        raise ValueError(f"{s['path']}: timescale 0")
    return VideoEntry(s["path"], s["key"], size, fingerprint, samples, TrackInfo.from_json(info))


_NPY_HEADER_MAX = 4096  # format 1.0 headers are padded to 64 bytes; ours are < 256


def check_members(entry: VideoEntry, sizes: dict[str, int]) -> None:
    """Every array of ``entry`` is in the archive with the size ``entry.samples`` implies."""
    for name in (*INT_COLUMNS, "pts"):
        member = f"{entry.key}/{name}.npy"
        if member not in sizes:
            raise KeyError(f"member {member} of {entry.path} is missing")
        payload = sizes[member] - 8 * entry.samples
        if not 0 < payload <= _NPY_HEADER_MAX:
            raise ValueError(
                f"member {member} holds {sizes[member]} bytes, not {entry.samples} samples"
            )
