"""The episode table: every episode's length, rows, files and times as columns.

Why a module of its own: at 100,000 to 1,000,000 episodes the table must be a few arrays, not a
Python object per episode (paths are codes into the distinct files, tasks stay Arrow lists,
positions are a binary search), and both readers, the plan, the doctor and the forecaster read
it; :mod:`feedline.episodes.format` fills it from ``meta/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from feedline.episodes.errors import EpisodeFormatError


@dataclass(frozen=True)
class VideoSpan:
    """One episode's stretch of one camera's MP4: video time = ``from_timestamp`` + row timestamp.

    Args:
        path: the MP4, relative to the dataset root.
        from_timestamp: where the episode starts in it (seconds).
        to_timestamp: where it ends (seconds, exclusive as LeRobot writes it).
    """

    path: str
    from_timestamp: float
    to_timestamp: float


@dataclass(frozen=True)
class Episode:
    """Everything the readers need about one episode.

    Args:
        episode_index: the episode.
        length: its frames.
        dataset_from_index: global ``index`` of its first row.
        dataset_to_index: global ``index`` one past its last row.
        data_path: the data Parquet file holding its rows.
        videos: per video key, its stretch of that camera's MP4.
        tasks: its task strings.
    """

    episode_index: int
    length: int
    dataset_from_index: int
    dataset_to_index: int
    data_path: str
    videos: dict[str, VideoSpan]
    tasks: tuple[str, ...]


class PathColumn(Sequence[str]):
    """One path per episode, stored as a code per episode into the distinct paths.

    At 100,000 episodes a list of path strings per column cost a template fill and a string per
    episode at the open; a dataset has a few hundred distinct files at most, so the column is an
    int32 array of codes plus the file list, and it pickles as arrays.

    Args:
        files: the distinct paths, in first-use order.
        codes: per episode, its path's index in ``files``.
    """

    __slots__ = ("codes", "files")

    def __init__(self, files: Sequence[str], codes: np.ndarray) -> None:
        self.files = list(files)
        self.codes = np.asarray(codes, np.int32)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.files[c] for c in self.codes[i].tolist()]
        return self.files[int(self.codes[i])]

    def __iter__(self) -> Iterator[str]:
        files = self.files
        return (files[c] for c in self.codes.tolist())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def take(self, rows: np.ndarray) -> PathColumn:
        """The column of ``rows`` (its files: those still used, in first-use order)."""
        codes = self.codes[rows]
        used, first = np.unique(codes, return_index=True)
        order = used[np.argsort(first)]
        remap = np.zeros(max(len(self.files), 1), np.int32)
        remap[order] = np.arange(len(order), dtype=np.int32)
        return PathColumn([self.files[c] for c in order.tolist()], remap[codes])

    def used(self) -> list[str]:
        """Every path used, each once, in first-use order."""
        codes, first = np.unique(self.codes, return_index=True)
        return [self.files[c] for c in codes[np.argsort(first)].tolist()]

    def positions(self) -> dict[str, np.ndarray]:
        """Per path, the positions (rows) of its episodes, ascending."""
        order = np.argsort(self.codes, kind="stable")
        codes = self.codes[order]
        bounds = np.flatnonzero(np.diff(codes)) + 1
        out = {}
        for part in np.split(order, bounds) if len(order) else []:
            out[self.files[int(self.codes[part[0]])]] = part
        return out


class TaskColumn(Sequence[tuple[str, ...]]):
    """Each episode's task strings, kept as Arrow lists and made Python tuples on demand.

    Args:
        tasks: a list-of-strings array, one entry per episode, or ``None`` (no task column).
        length: episodes (when ``tasks`` is ``None``).
    """

    __slots__ = ("_length", "tasks")

    def __init__(self, tasks: pa.Array | None, length: int) -> None:
        self.tasks = tasks
        self._length = len(tasks) if tasks is not None else int(length)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self.tasks is None:
            if not -self._length <= int(i) < self._length:
                raise IndexError(i)
            return ()
        return tuple(self.tasks[int(i)].as_py() or ())

    def take(self, rows: np.ndarray) -> TaskColumn:
        if self.tasks is None:
            return TaskColumn(None, len(rows))
        return TaskColumn(self.tasks.take(pa.array(rows, pa.int64())), len(rows))

    def __getstate__(self) -> tuple[Any, int]:
        return (self.tasks, self._length)

    def __setstate__(self, state: tuple[Any, int]) -> None:
        self.tasks, self._length = state


@dataclass
class EpisodeTable:
    """Episodes in ``episode_index`` order, as columns (cheap to slice, pickle and search).

    Every column has one entry per episode, in the same order; nothing is a Python object per
    episode (paths are codes into the distinct files, tasks stay Arrow lists), so a table of
    a million episodes is a few arrays.

    Args:
        episode_index: the episodes' indices (int64, ascending).
        length: their frames.
        dataset_from_index: global ``index`` of each one's first row.
        dataset_to_index: global ``index`` one past each one's last row.
        data_path: each one's data Parquet file.
        video_path: per video key, each one's MP4.
        from_timestamp: per video key, where each one starts in its MP4 (seconds).
        to_timestamp: per video key, where each one ends (seconds).
        tasks: each one's task strings.
    """

    episode_index: np.ndarray
    length: np.ndarray
    dataset_from_index: np.ndarray
    dataset_to_index: np.ndarray
    data_path: PathColumn
    video_path: dict[str, PathColumn]
    from_timestamp: dict[str, np.ndarray]
    to_timestamp: dict[str, np.ndarray]
    tasks: TaskColumn

    def __post_init__(self) -> None:
        if not isinstance(self.data_path, PathColumn):
            self.data_path = _path_column(self.data_path)
        self.video_path = {
            k: v if isinstance(v, PathColumn) else _path_column(v) for k, v in self.video_path.items()
        }
        if not isinstance(self.tasks, TaskColumn):
            self.tasks = TaskColumn(
                pa.array([list(t) for t in self.tasks], pa.list_(pa.string())), len(self.tasks)
            )
        self.episode_index = np.asarray(self.episode_index, np.int64)

    def __len__(self) -> int:
        return len(self.episode_index)

    def __contains__(self, episode_index: object) -> bool:
        try:
            self.position(int(episode_index))  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def position(self, episode_index: int) -> int:
        """The row of episode ``episode_index`` (``KeyError`` when it is not in the table)."""
        e = int(episode_index)
        i = int(np.searchsorted(self.episode_index, e))
        if i >= len(self.episode_index) or int(self.episode_index[i]) != e:
            raise KeyError(e)
        return i

    def positions(self, episodes: np.ndarray) -> np.ndarray:
        """The rows of many episodes at once (each must be in the table)."""
        episodes = np.asarray(episodes, np.int64)
        rows = np.searchsorted(self.episode_index, episodes)
        ok = (rows < len(self.episode_index)) & (
            self.episode_index[np.minimum(rows, max(len(self.episode_index) - 1, 0))] == episodes
        ) if len(self.episode_index) else np.zeros(len(episodes), bool)
        if not ok.all():
            raise KeyError(int(episodes[np.flatnonzero(~ok)[0]]))
        return rows

    _COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index")

    def __getitem__(self, episode_index: int | str) -> Any:
        """``table[e]`` is episode ``e``; ``table["dataset_from_index"]`` a column, as in LeRobot's
        ``meta.episodes[...]`` (what its ``EpisodeAwareSampler`` reads)."""
        if isinstance(episode_index, str):
            if episode_index not in self._COLUMNS:
                raise KeyError(f"{episode_index!r}: columns are {list(self._COLUMNS)}")
            return getattr(self, episode_index)
        i = self.position(episode_index)
        return Episode(
            episode_index=int(self.episode_index[i]),
            length=int(self.length[i]),
            dataset_from_index=int(self.dataset_from_index[i]),
            dataset_to_index=int(self.dataset_to_index[i]),
            data_path=self.data_path[i],
            videos={
                key: VideoSpan(
                    paths[i], float(self.from_timestamp[key][i]), float(self.to_timestamp[key][i])
                )
                for key, paths in self.video_path.items()
            },
            tasks=self.tasks[i],
        )

    def __iter__(self):
        return (self[int(e)] for e in self.episode_index)

    @property
    def num_frames(self) -> int:
        return int(self.length.sum())

    def select(self, episodes: Iterable[int] | None) -> EpisodeTable:
        """The given episodes (sorted, deduplicated: storage order, like LeRobot); ``None`` = all."""
        if episodes is None:
            return self
        wanted = np.unique(np.fromiter((int(e) for e in episodes), np.int64))
        rows = np.searchsorted(self.episode_index, wanted)
        present = rows < len(self)
        present[present] = self.episode_index[rows[present]] == wanted[present]
        if not present.all():
            missing = wanted[~present][:5].tolist()
            raise EpisodeFormatError(
                f"episodes {missing} not in the dataset (it has {len(self)} episodes, "
                f"indices {int(self.episode_index.min()) if len(self) else 0}..{int(self.episode_index.max()) if len(self) else -1})"
            )
        return self.take(rows)

    def take(self, rows: np.ndarray) -> EpisodeTable:
        """The table of ``rows`` (ascending positions)."""
        rows = np.asarray(rows, np.int64)
        return EpisodeTable(
            episode_index=self.episode_index[rows],
            length=self.length[rows],
            dataset_from_index=self.dataset_from_index[rows],
            dataset_to_index=self.dataset_to_index[rows],
            data_path=self.data_path.take(rows),
            video_path={k: v.take(rows) for k, v in self.video_path.items()},
            from_timestamp={k: v[rows] for k, v in self.from_timestamp.items()},
            to_timestamp={k: v[rows] for k, v in self.to_timestamp.items()},
            tasks=self.tasks.take(rows),
        )

    def data_files(self) -> list[str]:
        return self.data_path.used()

    def video_files(self) -> list[str]:
        """Every MP4 the selected episodes use, each once, in first-use order."""
        return list(dict.fromkeys(p for paths in self.video_path.values() for p in paths.used()))

    def positions_by_data_file(self) -> dict[str, np.ndarray]:
        """Per data file, the rows of its episodes."""
        return self.data_path.positions()

    def positions_by_video_file(self, key: str) -> dict[str, np.ndarray]:
        """Per MP4 of camera ``key``, the rows of its episodes."""
        return self.video_path[key].positions()


def _path_column(paths: Sequence[str]) -> PathColumn:
    files: dict[str, int] = {}
    codes = np.fromiter((files.setdefault(p, len(files)) for p in paths), np.int32, len(paths))
    return PathColumn(list(files), codes)


__all__ = ["Episode", "EpisodeTable", "PathColumn", "TaskColumn", "VideoSpan"]
