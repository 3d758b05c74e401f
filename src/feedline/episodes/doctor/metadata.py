"""The metadata checks: ``meta/info.json``, ``meta/episodes`` and ``meta/stats.json``.

The readers refuse a dataset whose episode rows disagree with themselves (a length that is not
its row range, totals that do not add up, an episode stretch of video whose duration is not its
length at the dataset's fps), and stop at the first problem. The doctor reads the same files with
the same code but leniently (``load_episode_table(strict=False)``), then reports *every* such row
as a finding with the readers' own rule, so fixing what it lists is what makes the readers open
the dataset. Stats are checked here too: a policy normalises with them, so a missing feature or a
NaN turns into a crash or a diverging loss far from its cause.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.episodes.doctor.findings import Findings
from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.format import (
    DURATION_SLACK_FRAMES,
    EPISODES_DIR,
    INFO_PATH,
    MAX_EPISODE_INDEX,
    STATS_PATH,
    TASKS_PATH,
    EpisodeTable,
    load_episode_table,
    read_info,
    read_tasks,
)
from feedline.io import NotFoundError, Store

#: Stats a normalising policy uses (LeRobot's ``mean_std`` and ``min_max`` modes).
NORMALISATION_STATS = ("mean", "std", "min", "max")
#: Feature dtypes LeRobot computes no stats for.
NO_STATS_DTYPES = ("string", "language")


@dataclass
class Metadata:
    """The dataset's metadata as the doctor read it.

    Args:
        info: ``meta/info.json``.
        table: every episode row, read leniently.
        episodes_files: the ``meta/episodes`` files.
        bad_spans: ``(video key, episode)`` pairs whose timestamps the readers refuse; the video
            checks skip them (one finding per problem).
    """

    info: dict[str, Any]
    table: EpisodeTable
    episodes_files: list[str]
    bad_spans: set[tuple[str, int]]

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    @property
    def video_keys(self) -> list[str]:
        return list(self.table.video_path)


def load_metadata(store: Store, findings: Findings) -> Metadata:
    """Read ``meta/`` and report every inconsistency the readers would refuse.

    A root without a readable ``meta/info.json`` or ``meta/episodes`` is not a dataset the doctor
    can examine: that is raised (one line from the CLI), not reported.
    """
    info = read_info(store)
    table, files = load_episode_table(store, info, strict=False)
    meta = Metadata(info, table, files, set())
    _check_rows(meta, findings)
    _check_spans(meta, findings)
    try:
        read_tasks(store)
    except EpisodeFormatError as exc:
        findings.error("metadata", TASKS_PATH, None, str(exc),
                       "rewrite meta/tasks.parquet with columns task_index (0..N-1) and task")
    return meta


def _check_rows(meta: Metadata, findings: Findings) -> None:
    table, info = meta.table, meta.info
    refuse = "the readers refuse this dataset until it is fixed"
    if len(table) != int(info["total_episodes"]):
        findings.error(
            "metadata", INFO_PATH, None,
            f"total_episodes={info['total_episodes']} but meta/episodes holds {len(table)} episode rows ({refuse})",
            f"set total_episodes to {len(table)} in meta/info.json, or restore the missing episode rows",
        )
    frames = int(table.length.sum())
    if frames != int(info["total_frames"]):
        findings.error(
            "metadata", INFO_PATH, None,
            f"total_frames={info['total_frames']} but the episodes hold {frames} frames ({refuse})",
            f"set total_frames to {frames} in meta/info.json",
        )
    if len(table) == 0:
        findings.error(
            "metadata", EPISODES_DIR, None,
            "meta/episodes holds no episode: there is nothing to read (the streaming reader refuses it)",
            "restore the meta/episodes rows, or point at the dataset's real root",
        )
    episodes_file = meta.episodes_files[0] if len(meta.episodes_files) == 1 else EPISODES_DIR
    for i in np.flatnonzero((table.episode_index < 0) | (table.episode_index > MAX_EPISODE_INDEX)):
        findings.error(
            "metadata", episodes_file, int(table.episode_index[i]),
            f"episode_index {int(table.episode_index[i])} is not in 0..{MAX_EPISODE_INDEX} ({refuse})",
            "renumber the episodes from 0 in meta/episodes and in the data files' episode_index",
        )
    span = table.dataset_to_index - table.dataset_from_index
    for i in np.flatnonzero((span != table.length) | (table.length < 1)):
        findings.error(
            "metadata", episodes_file, int(table.episode_index[i]),
            f"length {int(table.length[i])} but rows [{int(table.dataset_from_index[i])}, "
            f"{int(table.dataset_to_index[i])}) ({refuse})",
            "make length equal dataset_to_index - dataset_from_index in meta/episodes",
        )


def _check_spans(meta: Metadata, findings: Findings) -> None:
    """Each stretch of video must last its length at the dataset's fps (the readers' rule)."""
    fps = float(meta.fps)
    table = meta.table
    for key in meta.video_keys:
        start, end = table.from_timestamp[key], table.to_timestamp[key]
        duration = end - start
        finite = np.isfinite(start) & np.isfinite(end) & (start >= 0)
        with np.errstate(invalid="ignore"):
            off = np.abs(duration - table.length / fps) >= DURATION_SLACK_FRAMES / fps
        for i in np.flatnonzero(~finite | off):
            episode = int(table.episode_index[i])
            path = table.video_path[key][i]
            meta.bad_spans.add((key, episode))
            if not finite[i]:
                problem = f"from_timestamp {float(start[i])!r} / to_timestamp {float(end[i])!r} of {key} are not finite non-negative seconds"
            else:
                problem = (
                    f"{key}: to_timestamp - from_timestamp = {end[i]:.6g} - {start[i]:.6g} = {duration[i]:.6g} s, "
                    f"but length {int(table.length[i])} at {meta.fps} fps is {table.length[i] / fps:.6g} s "
                    f"({(duration[i] - table.length[i] / fps) * fps:+.2f} frames; the readers refuse "
                    f"a difference of {DURATION_SLACK_FRAMES} frame or more)"
                )
            findings.error(
                "timestamps", path, episode, problem,
                "set the episode's videos/<camera>/from_timestamp and to_timestamp in meta/episodes to "
                "where its frames sit in the MP4 (the frames check of a fixed dataset shows them), "
                "or fix meta/info.json's fps",
            )


def check_stats(store: Store, meta: Metadata, findings: Findings) -> None:
    """``meta/stats.json``: present, one entry per feature, every value finite."""
    try:
        raw = store.read_bytes(STATS_PATH)
    except NotFoundError:
        findings.warning(
            "stats", STATS_PATH, None,
            "meta/stats.json is missing: policies that normalise inputs and outputs cannot be built",
            "compute the stats (lerobot's compute_stats / aggregate_stats) and write meta/stats.json",
        )
        return
    try:
        stats = json.loads(raw)  # json accepts NaN and Infinity: they are what we look for
        if not isinstance(stats, dict):
            raise ValueError("not a JSON object")
    except (UnicodeDecodeError, ValueError) as exc:
        findings.error("stats", STATS_PATH, None, f"meta/stats.json is not valid JSON ({exc})",
                       "recompute the stats and rewrite meta/stats.json")
        return
    for key, feature in meta.info["features"].items():
        if not isinstance(feature, dict) or feature.get("dtype") in NO_STATS_DTYPES:
            continue
        per = stats.get(key)
        if not isinstance(per, dict):
            findings.warning(
                "stats", STATS_PATH, None, f"feature {key!r} has no stats",
                f"compute stats for {key!r} (a policy normalising it fails with a missing key)",
            )
            continue
        missing = [name for name in NORMALISATION_STATS if name not in per]
        if missing:
            findings.warning("stats", STATS_PATH, None, f"feature {key!r} lacks stats {missing}",
                             f"recompute the stats of {key!r}")
        bad = [name for name, value in per.items() if not _all_finite(value)]
        if bad:
            findings.error(
                "stats", STATS_PATH, None,
                f"feature {key!r} has NaN, infinite or non-numeric stats: {sorted(bad)}",
                f"recompute the stats of {key!r} (normalising with them makes every batch NaN); "
                "look for NaN values in its data first",
            )


def _all_finite(value: Any) -> bool:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(array).all())
