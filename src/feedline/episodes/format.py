"""The LeRobot v3 on-disk format: ``meta/info.json``, episodes, tasks and stats from any store.

Everything else in :mod:`feedline.episodes` starts from the :class:`EpisodeTable` built here: per
episode its length, its data file and global row range, and per camera its video file and
``from/to_timestamp``. Paths come from the ``data_path`` / ``video_path`` templates in
``meta/info.json`` and are checked to stay inside the dataset root, because a template is input
we did not write.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.parquet import VERIFY_PAGES, named_parquet_errors
from feedline.io import NotFoundError, Store, StoreError

CODEBASE_VERSION = "v3.0"  # what the synthetic writer records; readers accept any v3.x
DEFAULT_CHUNK_SIZE = 1000  # files per chunk folder (lerobot datasets/utils.py)
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DEFAULT_DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE_PATTERN + ".parquet"
INFO_PATH = "meta/info.json"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
EPISODES_DIR = "meta/episodes"
STATS_PREFIX = "stats/"
DURATION_SLACK_FRAMES = 0.999  # frames to_ts - from_ts may differ from length / fps (see below)


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


class FeatureInfo:
    """What ``info.json`` says of the samples: a dataset's and a mixture's metadata share it."""

    info: dict[str, Any]

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "image"]

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") in ("video", "image")]


@dataclass
class DatasetMeta(FeatureInfo):
    """``meta/`` of one dataset, read through a store.

    Args:
        store: where the dataset is read from.
        info: ``meta/info.json``.
        episodes: every episode of ``meta/episodes/``.
        tasks: task strings by ``task_index`` (``meta/tasks.parquet``).
        stats: ``meta/stats.json`` as arrays, or ``None`` when absent.
        episodes_files: the ``meta/episodes/`` Parquet files read.
    """

    store: Store
    info: dict[str, Any]
    episodes: EpisodeTable
    tasks: list[str]
    stats: dict[str, dict[str, np.ndarray]] | None
    episodes_files: list[str]

    @property
    def codebase_version(self) -> str:
        return str(self.info["codebase_version"])

    @property
    def total_episodes(self) -> int:
        return int(self.info["total_episodes"])

    @property
    def total_frames(self) -> int:
        return int(self.info["total_frames"])

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    def data_path(self, chunk_index: int, file_index: int) -> str:
        return resolve_template(
            self.info, "data_path", chunk_index=chunk_index, file_index=file_index
        )

    def video_path(self, video_key: str, chunk_index: int, file_index: int) -> str:
        return resolve_template(
            self.info,
            "video_path",
            video_key=video_key,
            chunk_index=chunk_index,
            file_index=file_index,
        )

    def episode_stats(self, episode_index: int) -> dict[str, dict[str, np.ndarray]]:
        """The ``stats/<feature>/<stat>`` columns of one episode (read on demand; most users never do)."""
        for path in self.episodes_files:
            with self.store.open(path) as handle, named_parquet_errors(self.store.url(path)):
                pf = pq.ParquetFile(handle, **VERIFY_PAGES)
                cols = [c for c in pf.schema_arrow.names if c.startswith(STATS_PREFIX)]
                table = pf.read(columns=["episode_index", *cols])
            hits = np.flatnonzero(table.column("episode_index").to_numpy() == episode_index)
            if len(hits):
                row = table.slice(int(hits[0]), 1).to_pylist()[0]
                out: dict[str, dict[str, np.ndarray]] = {}
                for col in cols:
                    feature, stat = col[len(STATS_PREFIX) :].rsplit("/", 1)
                    out.setdefault(feature, {})[stat] = np.asarray(row[col])
                return out
        raise EpisodeFormatError(
            f"{self.store.url(EPISODES_DIR)}: no stats row for episode {episode_index}"
        )


def resolve_template(info: dict[str, Any], key: str, **values: Any) -> str:
    """Fill a path template from ``meta/info.json``; refuse one that leaves the dataset root."""
    template = info.get(key)
    if not isinstance(template, str) or not template:
        raise EpisodeFormatError(f"{INFO_PATH}: '{key}' is missing or not a string template")
    try:
        path = template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise EpisodeFormatError(
            f"{INFO_PATH}: '{key}' template {template!r} cannot be filled ({exc})"
        ) from None
    clean = posixpath.normpath(path)
    if (
        path.startswith("/")
        or "\\" in path
        or "://" in path
        or clean == ".."
        or clean.startswith("../")
        or clean in ("", ".")
    ):
        raise EpisodeFormatError(
            f"{INFO_PATH}: '{key}' template {template!r} gives {path!r}, which escapes the dataset root"
        )
    return clean


def read_info(store: Store) -> dict[str, Any]:
    """``meta/info.json``, checked for a v3.x codebase version and the keys readers rely on."""
    where = store.url(INFO_PATH)
    try:
        raw = store.read_bytes(INFO_PATH)
    except NotFoundError:
        raise EpisodeFormatError(
            f"{where}: not found; is this the root of a LeRobot v3 dataset?"
        ) from None
    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EpisodeFormatError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise EpisodeFormatError(f"{where}: expected a JSON object")
    version = info.get("codebase_version")
    if not isinstance(version, str) or not (version == "v3" or version.startswith("v3.")):
        raise EpisodeFormatError(
            f"{where}: codebase_version {version!r} is not supported; feedline reads LeRobot v3.x datasets "
            "(convert older ones with lerobot's convert_dataset_v21_to_v30)"
        )
    for key in ("fps", "features", "total_episodes", "total_frames", "data_path"):
        if key not in info:
            raise EpisodeFormatError(f"{where}: required key '{key}' is missing")
    if not isinstance(info["features"], dict):
        raise EpisodeFormatError(f"{where}: 'features' must be an object")
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, int | float) or fps <= 0 or int(fps) != fps:
        raise EpisodeFormatError(f"{where}: fps {fps!r} must be a positive integer")
    for key in ("total_episodes", "total_frames"):
        value = info[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise EpisodeFormatError(f"{where}: {key} {value!r} must be a non-negative integer")
    for key, ft in info["features"].items():
        facts = ft.get("info") if isinstance(ft, dict) and ft.get("dtype") == "video" else None
        video_fps = facts.get("video.fps") if isinstance(facts, dict) else None
        if video_fps is not None and video_fps != fps:
            raise EpisodeFormatError(
                f"{where}: fps {fps!r} but feature {key!r} says video.fps {video_fps!r}"
            )
    if any(ft.get("dtype") == "video" for ft in info["features"].values() if isinstance(ft, dict)):
        resolve_template(info, "video_path", video_key="k", chunk_index=0, file_index=0)
    resolve_template(info, "data_path", chunk_index=0, file_index=0)
    return info


def _read_parquet(store: Store, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    try:
        with store.open(path) as handle, named_parquet_errors(store.url(path)):
            # Not pq.read_table: with a page failing its CRC, pyarrow 26's dataset reader hangs
            # (use_threads=False) or aborts the process at exit; ParquetFile.read raises cleanly.
            pf = pq.ParquetFile(handle, **VERIFY_PAGES)
            return pf.read(columns=list(columns) if columns is not None else None)
    except NotFoundError:
        raise EpisodeFormatError(f"{store.url(path)}: not found") from None


def read_tasks(store: Store) -> list[str]:
    """``meta/tasks.parquet`` as a list indexed by ``task_index``."""
    table = _read_parquet(store, TASKS_PATH)
    names = set(table.column_names)
    task_col = (
        "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
    )
    if "task_index" not in names or task_col is None:
        raise EpisodeFormatError(
            f"{store.url(TASKS_PATH)}: needs columns 'task_index' and 'task', has {sorted(names)}"
        )
    indices = table.column("task_index").to_pylist()
    tasks = table.column(task_col).to_pylist()
    if sorted(indices) != list(range(len(indices))):
        raise EpisodeFormatError(
            f"{store.url(TASKS_PATH)}: task_index must be 0..{len(indices) - 1}"
        )
    out = [""] * len(indices)
    for i, t in zip(indices, tasks, strict=True):
        out[i] = str(t)
    return out


def read_stats(store: Store) -> dict[str, dict[str, np.ndarray]] | None:
    """``meta/stats.json`` (optional in LeRobot; ``None`` when absent)."""
    try:
        raw = store.read_bytes(STATS_PATH)
    except NotFoundError:
        return None
    try:
        stats = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EpisodeFormatError(f"{store.url(STATS_PATH)}: not valid JSON ({exc})") from None
    return {feat: {name: np.asarray(v) for name, v in per.items()} for feat, per in stats.items()}


def episodes_files(store: Store, info: dict[str, Any]) -> list[str]:
    """The ``meta/episodes`` Parquet files: listed where the store can list, else probed in order."""
    try:
        listed = [o.path for o in store.list(EPISODES_DIR + "/") if o.path.endswith(".parquet")]
    except StoreError:
        listed = None
    if listed:
        return listed
    chunks_size = int(info.get("chunks_size") or DEFAULT_CHUNK_SIZE)
    found: list[str] = []
    rows = 0
    chunk, file = 0, 0
    while rows < int(info["total_episodes"]):
        path = EPISODES_PATH.format(chunk_index=chunk, file_index=file)
        try:
            with store.open(path) as handle, named_parquet_errors(store.url(path)):
                rows += pq.ParquetFile(handle).metadata.num_rows
        except NotFoundError:
            raise EpisodeFormatError(
                f"{store.url(path)}: not found, but {INFO_PATH} promises {info['total_episodes']} episodes and "
                f"only {rows} were found before it"
            ) from None
        found.append(path)
        file += 1
        if file == chunks_size:
            chunk, file = chunk + 1, 0
    return found


def _video_keys(info: dict[str, Any]) -> list[str]:
    return [
        k
        for k, ft in info["features"].items()
        if isinstance(ft, dict) and ft.get("dtype") == "video"
    ]


def read_episode_table(
    store: Store, info: dict[str, Any], files: list[str], *, strict: bool = True
) -> EpisodeTable:
    """All rows of ``meta/episodes`` (without the stats columns) as an :class:`EpisodeTable`;
    ``strict=False`` skips the consistency checks (``feedline doctor`` reports each itself)."""
    video_keys = _video_keys(info)
    base = [
        "episode_index",
        "length",
        "dataset_from_index",
        "dataset_to_index",
        "data/chunk_index",
        "data/file_index",
    ]
    tables = []
    for path in files:
        try:  # one open per file: its schema and the columns read come from the same footer
            with store.open(path) as handle, named_parquet_errors(store.url(path)):
                pf = pq.ParquetFile(handle, **VERIFY_PAGES)
                names = list(pf.schema_arrow.names)
                part = _episode_columns(store, path, pf, names, base, video_keys)
        except NotFoundError:
            raise EpisodeFormatError(f"{store.url(path)}: not found") from None
        tables.append(part.append_column(_FILE_COLUMN, pa.array([len(tables)] * part.num_rows, pa.int32())))
    if not tables:
        raise EpisodeFormatError(f"{store.url(EPISODES_DIR)}: no episode metadata files")
    with named_parquet_errors(store.url(EPISODES_DIR)):  # columns of unusable types
        return _episode_table(store, info, video_keys, tables, files, strict)


def _episode_columns(
    store: Store, path: str, pf: pq.ParquetFile, names: list[str], base: list[str],
    video_keys: list[str],
) -> pa.Table:
    """The columns the readers need of one ``meta/episodes`` file (per-episode stats, most of
    its bytes, are left for :meth:`DatasetMeta.episode_stats`)."""
    wanted = [c for c in names if not c.startswith(STATS_PREFIX)]
    missing = [c for c in base if c not in names]
    for key in video_keys:
        missing += [
            c
            for c in (
                f"videos/{key}/chunk_index",
                f"videos/{key}/file_index",
                f"videos/{key}/from_timestamp",
                f"videos/{key}/to_timestamp",
            )
            if c not in names
        ]
    if missing:
        raise EpisodeFormatError(f"{store.url(path)}: missing column(s) {missing[:4]}")
    return pf.read(columns=wanted)


_FILE_COLUMN = "__feedline_file"  # which meta/episodes file a row came from (for messages)


def _episode_table(
    store: Store,
    info: dict[str, Any],
    video_keys: list[str],
    tables: list[pa.Table],
    files: list[str],
    strict: bool = True,
) -> EpisodeTable:
    table = pa.concat_tables(tables, promote_options="permissive")
    table = table.sort_by("episode_index")
    row_file = table.column(_FILE_COLUMN).to_numpy()

    def file_of(row: int) -> str:
        return store.url(files[int(row_file[row])])

    def ints(col: str) -> np.ndarray:
        return np.asarray(table.column(col).to_numpy(zero_copy_only=False), dtype=np.int64)

    episode_index = ints("episode_index")
    length = ints("length")
    from_index, to_index = ints("dataset_from_index"), ints("dataset_to_index")
    where = store.url(EPISODES_DIR)
    if len(np.unique(episode_index)) != len(episode_index):
        raise EpisodeFormatError(f"{where}: episode_index values repeat")
    bad = np.flatnonzero((to_index - from_index != length) | (length < 1))
    if len(bad) and strict:
        e = int(episode_index[bad[0]])
        raise EpisodeFormatError(
            f"{file_of(bad[0])}: episode {e} has length {int(length[bad[0]])} but rows "
            f"[{int(from_index[bad[0]])}, {int(to_index[bad[0]])})"
        )
    if strict and len(episode_index) != int(info["total_episodes"]):
        raise EpisodeFormatError(
            f"{where}: {len(episode_index)} episode rows but {INFO_PATH} says total_episodes={info['total_episodes']}"
        )
    data_path = _template_column(
        info, "data_path", ints("data/chunk_index"), ints("data/file_index")
    )
    video_path, from_ts, to_ts = {}, {}, {}
    for key in video_keys:
        video_path[key] = _template_column(
            info, "video_path", ints(f"videos/{key}/chunk_index"),
            ints(f"videos/{key}/file_index"), video_key=key,
        )
        from_ts[key] = np.asarray(
            table.column(f"videos/{key}/from_timestamp").to_numpy(zero_copy_only=False), np.float64
        )
        to_ts[key] = np.asarray(
            table.column(f"videos/{key}/to_timestamp").to_numpy(zero_copy_only=False), np.float64
        )
        if strict:
            _check_timestamps(info, key, length, from_ts[key], to_ts[key], episode_index, file_of)
    total_frames = int(length.sum())
    if strict and total_frames != int(info["total_frames"]):
        raise EpisodeFormatError(
            f"{store.url(INFO_PATH)}: total_frames={info['total_frames']} but the episodes of "
            f"{where} hold {total_frames} frames"
        )
    tasks = TaskColumn(
        table.column("tasks").combine_chunks() if "tasks" in table.column_names else None,
        len(episode_index),
    )
    return EpisodeTable(
        episode_index, length, from_index, to_index, data_path, video_path, from_ts, to_ts, tasks
    )


def _template_column(
    info: dict[str, Any], key: str, chunks: np.ndarray, files: np.ndarray, **values: Any
) -> PathColumn:
    """A path template filled once per distinct ``(chunk, file)`` pair, as a :class:`PathColumn`."""
    pairs, codes = np.unique(np.stack([chunks, files], axis=1), axis=0, return_inverse=True)
    paths = [
        resolve_template(info, key, chunk_index=int(c), file_index=int(f), **values)
        for c, f in pairs.tolist()
    ]
    return PathColumn(paths, np.asarray(codes, np.int32).reshape(-1))


def _check_timestamps(
    info: dict[str, Any],
    key: str,
    length: np.ndarray,
    from_ts: np.ndarray,
    to_ts: np.ndarray,
    episode_index: np.ndarray,
    file_of: Any,
) -> None:
    """Each episode's stretch of camera ``key`` must last ``length / fps`` to within less than
    one frame, else its frames would be read from the wrong times. (LeRobot measures
    ``to_timestamp`` from the encoded video, which may differ from ``length / fps`` by a
    fraction of a frame; the readers allow for that.)"""
    fps = float(info["fps"])
    duration = to_ts - from_ts
    bad = np.flatnonzero(
        ~np.isfinite(from_ts) | ~np.isfinite(to_ts) | (from_ts < 0)
        | (np.abs(duration - length / fps) >= DURATION_SLACK_FRAMES / fps)
    )
    if len(bad):
        i = int(bad[0])
        raise EpisodeFormatError(
            f"{file_of(i)}: episode {int(episode_index[i])} camera {key}: to_timestamp - "
            f"from_timestamp = {to_ts[i]!r} - {from_ts[i]!r} = {duration[i]:.6g} s, but length "
            f"{int(length[i])} at fps {info['fps']} is {length[i] / fps:.6g} s "
            f"({len(bad)} episode(s) disagree; is meta/info.json's fps right?)"
        )


def load_meta(store: Store) -> DatasetMeta:
    """Read a dataset's ``meta/`` through ``store`` (a few small reads; no payload is touched)."""
    info = read_info(store)
    files = episodes_files(store, info)
    episodes = read_episode_table(store, info, files)
    return DatasetMeta(
        store=store,
        info=info,
        episodes=episodes,
        tasks=read_tasks(store),
        stats=read_stats(store),
        episodes_files=files,
    )
