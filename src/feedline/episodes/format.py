"""The LeRobot v3 on-disk format: ``meta/info.json``, episodes, tasks and stats from any store.

Everything else in :mod:`feedline.episodes` starts from the :class:`EpisodeTable` built here: per
episode its length, its data file and global row range, and per camera its video file and
``from/to_timestamp``. Paths come from the ``data_path`` / ``video_path`` templates in
``meta/info.json`` and are checked to stay inside the dataset root, because a template is input
we did not write.
"""

from __future__ import annotations

import functools
import itertools
import json
import posixpath
import re
import string
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.metacache import cached_episode_table
from feedline.episodes.parquet import VERIFY_PAGES, named_parquet_errors
from feedline.episodes.table import (  # Episode, VideoSpan: re-exported, they were born here
    Episode,  # noqa: F401
    EpisodeTable,
    PathColumn,
    TaskColumn,
    VideoSpan,  # noqa: F401
)
from feedline.io import NotFoundError, Store, StoreError
from feedline.io.paths import root_escape

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
#: Largest ``episode_index`` the readers take: LeRobot counts episodes from 0, so a value past
#: int32 is damage, and the scheduler's unit ids (copies x index) must stay within int64.
MAX_EPISODE_INDEX = 2**31 - 1
STATS_PREFIX = "stats/"
META_READERS = 4  # meta/episodes files read at once
WHOLE_READ_BYTES = 1 << 20  # meta/episodes files up to this size are read in one request
DURATION_SLACK_FRAMES = 0.999  # frames to_ts - from_ts may differ from length / fps (see below)


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


#: The fields each path template may use (LeRobot v3's ``info.json``), with plain format specs.
TEMPLATE_FIELDS = {
    "data_path": frozenset({"chunk_index", "file_index"}),
    "video_path": frozenset({"video_key", "chunk_index", "file_index"}),
}
#: A plain spec: optional fill and align, sign, zero, a width of at most two digits, ``d`` or ``s``.
_PLAIN_SPEC = re.compile(r"(?:[^{}]?[<>=^])?[+\- ]?0?\d{0,2}[ds]?")


@functools.lru_cache(maxsize=64)
def _check_template(key: str, template: str) -> None:
    """Refuse a template that uses other than its documented fields or specs: ``str.format``
    would follow attributes (``{video_key.__init__.__globals__}``) and pad to any width
    (``{chunk_index:0>1000000000}`` asks for a 1 GB string)."""
    allowed = TEMPLATE_FIELDS.get(key, frozenset())
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise EpisodeFormatError(f"{INFO_PATH}: '{key}' template {template!r} cannot be filled ({exc})") from None
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in allowed:
            raise EpisodeFormatError(
                f"{INFO_PATH}: '{key}' template {template!r} cannot be filled ({{{name}}} is not one of "
                + ", ".join(f"{{{f}}}" for f in sorted(allowed)) + ")"
            )
        if conversion is not None or not _PLAIN_SPEC.fullmatch(spec or ""):
            shown = f"!{conversion}" if conversion is not None else f":{spec}"
            raise EpisodeFormatError(
                f"{INFO_PATH}: '{key}' template {template!r} cannot be filled ({{{name}{shown}}} is not a "
                "plain format; use a width of at most 99, as in {chunk_index:03d})"
            )


def resolve_template(info: dict[str, Any], key: str, **values: Any) -> str:
    """Fill a path template from ``meta/info.json``; refuse one that leaves the dataset root,
    as written or percent-decoded (the server decodes ``%2e%2e/`` before it resolves the path)."""
    template = info.get(key)
    if not isinstance(template, str) or not template:
        raise EpisodeFormatError(f"{INFO_PATH}: '{key}' is missing or not a string template")
    _check_template(key, template)
    try:
        path = template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise EpisodeFormatError(
            f"{INFO_PATH}: '{key}' template {template!r} cannot be filled ({exc})"
        ) from None
    clean = posixpath.normpath(path)
    if "://" in path or clean in ("", ".") or root_escape(path) is not None:
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


def _listed_episodes_files(store: Store) -> list[str] | None:
    try:
        return [o.path for o in store.list(EPISODES_DIR + "/") if o.path.endswith(".parquet")]
    except StoreError:
        return None


def _episodes_paths(info: dict[str, Any]) -> Iterator[str]:
    """``meta/episodes`` file paths in LeRobot's order (chunk after chunk), without end."""
    chunks_size = int(info.get("chunks_size") or DEFAULT_CHUNK_SIZE)
    for n in itertools.count():
        yield EPISODES_PATH.format(chunk_index=n // chunks_size, file_index=n % chunks_size)


def _missing_episodes_file(store: Store, info: dict[str, Any], path: str, rows: int) -> EpisodeFormatError:
    return EpisodeFormatError(
        f"{store.url(path)}: not found, but {INFO_PATH} promises {info['total_episodes']} episodes and "
        f"only {rows} were found before it"
    )


def _video_keys(info: dict[str, Any]) -> list[str]:
    return [
        k
        for k, ft in info["features"].items()
        if isinstance(ft, dict) and ft.get("dtype") == "video"
    ]


_BASE_COLUMNS = [
    "episode_index",
    "length",
    "dataset_from_index",
    "dataset_to_index",
    "data/chunk_index",
    "data/file_index",
]


def _read_part(
    store: Store, path: str, number: int, video_keys: list[str], missing_ok: bool = False
) -> pa.Table | None:
    """One ``meta/episodes`` file's columns, tagged with its number (``None``: not found and
    ``missing_ok``)."""
    try:  # one open per file: its schema and the columns read come from the same footer
        with store.open(path) as handle, named_parquet_errors(store.url(path)):
            size = handle.seek(0, 2)
            handle.seek(0)
            # A small file is one read: the footer's read-ahead already holds most of it, and
            # pyarrow's column reads would fetch it again.
            source = pa.BufferReader(handle.read()) if size <= WHOLE_READ_BYTES else handle
            pf = pq.ParquetFile(source, **VERIFY_PAGES)
            names = list(pf.schema_arrow.names)
            part = _episode_columns(store, path, pf, names, _BASE_COLUMNS, video_keys)
    except NotFoundError:
        if missing_ok:
            return None
        raise EpisodeFormatError(f"{store.url(path)}: not found") from None
    return part.append_column(_FILE_COLUMN, pa.array(np.full(part.num_rows, number, np.int32)))


def read_episode_table(
    store: Store, info: dict[str, Any], files: list[str], *, strict: bool = True
) -> EpisodeTable:
    """All rows of ``meta/episodes`` (without the stats columns) as an :class:`EpisodeTable`;
    ``strict=False`` skips the consistency checks (``feedline doctor`` reports each itself)."""
    video_keys = _video_keys(info)
    # Files are read a few at once: over HTTP each one is a few round trips, and pyarrow parses
    # and decodes without the GIL (200 files at 1,000,000 episodes).
    if len(files) > 1:
        with ThreadPoolExecutor(min(META_READERS, len(files)), "feedline-meta") as pool:
            tables = list(pool.map(lambda n: _read_part(store, files[n], n, video_keys), range(len(files))))
    else:
        tables = [_read_part(store, path, 0, video_keys) for path in files]
    return _table_of(store, info, video_keys, tables, files, strict)


def _table_of(
    store: Store, info: dict[str, Any], video_keys: list[str], tables: list[Any],
    files: list[str], strict: bool,
) -> EpisodeTable:
    if not tables:
        raise EpisodeFormatError(f"{store.url(EPISODES_DIR)}: no episode metadata files")
    with named_parquet_errors(store.url(EPISODES_DIR)):  # columns of unusable types
        return _episode_table(store, info, video_keys, tables, files, strict)


def load_episode_table(
    store: Store, info: dict[str, Any], *, strict: bool = True
) -> tuple[EpisodeTable, list[str]]:
    """The episode table and the ``meta/episodes`` files it came from. Where the store cannot
    list, the files are found by reading them in order until ``total_episodes`` rows are in:
    each is read once (probing first, then reading, fetched every footer twice: 263 of the
    363 MiB ``feedline doctor`` read at 100,000 episodes over HTTP)."""
    listed = _listed_episodes_files(store)
    if listed:
        return read_episode_table(store, info, listed, strict=strict), listed
    video_keys = _video_keys(info)
    total = int(info["total_episodes"])
    tables: list[pa.Table] = []
    files: list[str] = []
    rows = 0
    order = _episodes_paths(info)
    with ThreadPoolExecutor(META_READERS, "feedline-meta") as pool:
        while rows < total:
            batch = [next(order) for _ in range(META_READERS)]
            parts = list(pool.map(
                lambda item: _read_part(store, item[1], item[0], video_keys, True),
                enumerate(batch, len(files)),
            ))
            for path, part in zip(batch, parts, strict=True):
                if rows >= total:
                    break
                if part is None:
                    raise _missing_episodes_file(store, info, path, rows)
                tables.append(part)
                files.append(path)
                rows += part.num_rows
    return _table_of(store, info, video_keys, tables, files, strict), files


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
    out_of_range = np.flatnonzero((episode_index < 0) | (episode_index > MAX_EPISODE_INDEX))
    if len(out_of_range) and strict:
        raise EpisodeFormatError(f"{file_of(out_of_range[0])}: episode_index "
                                 f"{int(episode_index[out_of_range[0]])} is not in 0..{MAX_EPISODE_INDEX}")
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
            f"from_timestamp = {float(to_ts[i])!r} - {float(from_ts[i])!r} = {duration[i]:.6g} s, but length "
            f"{int(length[i])} at fps {info['fps']} is {length[i] / fps:.6g} s "
            f"({len(bad)} episode(s) disagree; is meta/info.json's fps right?)"
        )


def load_meta(store: Store) -> DatasetMeta:
    """Read a dataset's ``meta/`` through ``store`` (a few small reads; no payload is touched)."""
    info = read_info(store)

    def build() -> tuple[EpisodeTable, list[str]]:
        return load_episode_table(store, info)

    first = EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes, files = cached_episode_table(store, info, first, build)
    return DatasetMeta(
        store=store,
        info=info,
        episodes=episodes,
        tasks=read_tasks(store),
        stats=read_stats(store),
        episodes_files=files,
    )
