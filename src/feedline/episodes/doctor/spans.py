"""Each episode's stretch of each video against its metadata: frames, timestamps, tolerance.

An episode of ``length`` frames claims ``[from_timestamp, to_timestamp)`` of a camera's MP4, and
the readers ask for the frame at ``from_timestamp + timestamp`` of each row. Three questions, in
this order, one finding per episode and video at most (a missing frame also moves the episode's
end and every later offset, so only the first problem found is reported):

1. **frames**: does the container present ``length`` frames in the stretch? Each frame is
   counted in the half-frame-shifted window ``[from - h, to - h)`` (``h`` = half a frame), which
   holds exactly the episode's frames when the timestamps are right to within half a frame.
2. **timestamps**: do ``from_timestamp`` and ``to_timestamp`` sit where the encoded episode
   starts and ends (its first frame, and the next frame or the end of the last one)?
3. **tolerance**: how far is each wanted time from the nearest frame? The readers fail beyond
   ``tolerance_s`` (LeRobot's default 1e-4 s), so the largest offset is the tolerance this
   dataset needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from feedline.episodes.doctor.findings import Findings
from feedline.episodes.video.minimp4 import nearest_samples_within
from feedline.episodes.video.mp4.table import SampleTable

#: LeRobot's default ``tolerance_s`` (and feedline's readers').
DEFAULT_TOLERANCE_S = 1e-4
#: Frames ``from/to_timestamp`` may sit off the encoded start and end before a warning.
TIMESTAMP_SLACK_FRAMES = 0.25


@dataclass
class Offsets:
    """The largest time offset seen, and where (the tolerance check's result).

    Args:
        max_offset_s: largest ``|frame time - wanted time|`` over every frame checked.
        frames: frames checked.
        file: the video of the largest offset.
        episode: its episode.
    """

    max_offset_s: float = 0.0
    frames: int = 0
    file: str | None = None
    episode: int | None = None

    def add(self, offset: float, frames: int, file: str, episode: int) -> None:
        self.frames += frames
        if offset > self.max_offset_s:
            self.max_offset_s, self.file, self.episode = offset, file, episode


def suggest_tolerance(offset_s: float) -> float:
    """A round ``tolerance_s`` (1, 2 or 5 × 10^k) above ``offset_s`` with room for float noise,
    never below LeRobot's default."""
    need = max(offset_s * 1.5, DEFAULT_TOLERANCE_S)
    exponent = math.floor(math.log10(need))
    for step in (1, 2, 5, 10):
        value = step * 10.0**exponent
        if value >= need * (1 - 1e-12):
            return float(f"{value:.3g}")
    raise AssertionError("unreachable")


def _end_of(table: SampleTable, hi: int) -> float:
    """Where the frame before display position ``hi`` ends: the next frame, or the track's end."""
    times = table.display_pts
    if hi < len(times):
        return float(times[hi])
    last = int(table.display_order[hi - 1])
    return float(times[hi - 1]) + float(table.durations(last, last)[0]) / table.info.timescale


def check_span(
    table: SampleTable,
    path: str,
    key: str,
    episode: int,
    length: int,
    start: float,
    end: float,
    fps: int,
    stamps: np.ndarray | None,
    findings: Findings,
    offsets: Offsets,
) -> None:
    """The three checks of one episode's stretch of one video (see the module docstring)."""
    times = table.display_pts
    half = 0.5 / fps
    lo = int(np.searchsorted(times, start - half, "left"))
    hi = int(np.searchsorted(times, end - half, "left"))
    count = hi - lo
    if count != length:
        gap = length - count
        findings.error(
            "frames", path, episode,
            f"{key}: the container holds {count} frames in the episode's [{start:.6g}, {end:.6g}) s, the "
            f"episode has {length} ({abs(gap)} {'fewer' if gap > 0 else 'more'} in the video)",
            "re-encode the episode's video from its source frames, or drop the episode"
            if gap > 0 else
            "set the episode's from/to_timestamp in meta/episodes to its frames in this video",
        )
        return
    frame_s = 1.0 / fps
    first, stop = float(times[lo]), _end_of(table, hi)
    drift = max(abs(first - start), abs(stop - end))
    if drift > TIMESTAMP_SLACK_FRAMES * frame_s:
        findings.warning(
            "timestamps", path, episode,
            f"{key}: meta/episodes says [{start:.6g}, {end:.6g}) s but the encoded episode spans "
            f"[{first:.6g}, {stop:.6g}) s ({drift * fps:.2f} frames off)",
            f"set from_timestamp={first:.6g} and to_timestamp={stop:.6g} for this camera in meta/episodes",
        )
        return
    wanted = start + (stamps if stamps is not None and len(stamps) == length else np.arange(length) / fps)
    samples, _ = nearest_samples_within(table, wanted, DEFAULT_TOLERANCE_S)
    offset = float(np.abs(np.asarray(table.pts)[samples] - wanted).max())
    offsets.add(offset, length, path, episode)
    if offset > DEFAULT_TOLERANCE_S:
        _tolerance_warning(findings, path, episode, key, offset, half)


def _tolerance_warning(
    findings: Findings, path: str, episode: int, key: str, offset: float, half: float
) -> None:
    """A wanted time ``offset`` seconds from its nearest frame: what tolerance would read it,
    or that none picks the right frame (``half``: half a frame)."""
    where = "nearest frame is another frame" if offset >= half else "frame is there, off its time"
    findings.warning(
        "tolerance", path, episode,
        f"{key}: a wanted time is {offset:.3g} s from the nearest frame ({where}); the readers' "
        f"default tolerance_s={DEFAULT_TOLERANCE_S:g} fails on it",
        f"open the dataset with tolerance_s={suggest_tolerance(offset):g}"
        if offset < half else "fix the episode's timestamps or from_timestamp: no tolerance picks the right frame",
    )


def check_video_spans(
    table: SampleTable,
    path: str,
    key: str,
    episodes: np.ndarray,
    lengths: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    fps: int,
    stamps: dict[int, np.ndarray],
    findings: Findings,
    offsets: Offsets,
) -> None:
    """:func:`check_span` for every episode stretch of one video at once, with array operations
    (at 5,000 episodes per video a Python call per episode cost seconds); the same findings in
    the same order of checks. ``stamps``: data timestamps of the episodes whose rows were read."""
    n = len(episodes)
    if n == 0:
        return
    times = table.display_pts
    half = 0.5 / fps
    lo = np.searchsorted(times, starts - half, "left")
    hi = np.searchsorted(times, ends - half, "left")
    bad = (hi - lo) != lengths
    for i in np.flatnonzero(bad):
        check_span(table, path, key, int(episodes[i]), int(lengths[i]), float(starts[i]), float(ends[i]),
                   fps, stamps.get(int(episodes[i])), findings, offsets)
    good = np.flatnonzero(~bad & (lengths > 0))
    if len(good) == 0:
        return
    frame_s = 1.0 / fps
    first = times[lo[good]]
    tail = _end_of(table, len(times)) if len(times) else 0.0
    h = hi[good]
    stop = np.where(h < len(times), times[np.minimum(h, len(times) - 1)], tail)
    drift = np.maximum(np.abs(first - starts[good]), np.abs(stop - ends[good]))
    off = drift > TIMESTAMP_SLACK_FRAMES * frame_s
    for i in good[off]:
        check_span(table, path, key, int(episodes[i]), int(lengths[i]), float(starts[i]), float(ends[i]),
                   fps, stamps.get(int(episodes[i])), findings, offsets)
    good = good[~off]
    if len(good) == 0:
        return
    counts = lengths[good].astype(np.int64)
    begin = np.zeros(len(good), np.int64)
    np.cumsum(counts[:-1], out=begin[1:])
    frame = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(begin, counts)
    rel = frame / fps
    for j, i in enumerate(good.tolist()):
        got = stamps.get(int(episodes[i]))
        if got is not None and len(got) == counts[j]:
            rel[begin[j] : begin[j] + counts[j]] = got
    wanted = np.repeat(starts[good], counts) + rel
    samples, _ = nearest_samples_within(table, wanted, DEFAULT_TOLERANCE_S)
    per = np.maximum.reduceat(np.abs(np.asarray(table.pts, dtype=np.float64)[samples] - wanted), begin)
    for j in np.flatnonzero(per > DEFAULT_TOLERANCE_S):
        _tolerance_warning(findings, path, int(episodes[good[j]]), key, float(per[j]), half)
    top = int(np.argmax(per))
    offsets.add(float(per[top]), int(counts.sum()), path, int(episodes[good[top]]))


def summarise_tolerance(offsets: Offsets, fps: int, findings: Findings) -> None:
    """The dataset's largest offset and the ``tolerance_s`` it needs (an info line)."""
    if not offsets.frames:
        return
    half = 0.5 / fps
    need = suggest_tolerance(offsets.max_offset_s)
    where = f" (in {offsets.file}, episode {offsets.episode})" if offsets.file else ""
    if offsets.max_offset_s < half:
        findings.info(
            "tolerance", None, None,
            f"largest offset between a wanted time and its frame: {offsets.max_offset_s:.3g} s over "
            f"{offsets.frames} frames{where}; tolerance_s={need:g} is enough"
            + (" (the default)" if need <= DEFAULT_TOLERANCE_S else ""),
        )
    else:
        findings.info(
            "tolerance", None, None,
            f"largest offset between a wanted time and its frame: {offsets.max_offset_s:.3g} s over "
            f"{offsets.frames} frames{where}, half a frame or more: no tolerance_s reads the right frames",
        )
