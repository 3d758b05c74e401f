"""Format layer: meta/info.json, episodes, tasks, stats and path templates from any store."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.format import load_meta, resolve_template
from feedline.episodes.synth.writer import DEFAULT_TASKS, SyntheticDataset
from feedline.io import open_store


def _check_table(meta, ds: SyntheticDataset) -> None:
    table = meta.episodes
    assert len(table) == len(ds.episode_lengths)
    assert table.length.tolist() == ds.episode_lengths
    assert table.dataset_from_index.tolist() == ds.episode_from_index
    assert (table.dataset_to_index - table.dataset_from_index).tolist() == ds.episode_lengths
    assert table.data_files() == ds.data_files
    assert table.video_files() == [p for key in ds.camera_keys for p in ds.video_files[key]]
    for ep in table:
        assert ep.tasks == (ds.episode_tasks[ep.episode_index],)
        for key in ds.camera_keys:
            span = ep.videos[key]
            assert span.path in ds.video_files[key]
            assert span.to_timestamp - span.from_timestamp == pytest.approx(ep.length / ds.fps)


@pytest.mark.parametrize("where", ["local", "http", "s3"])
def test_reads_meta_from_every_store(where, open_root, av1_dataset):
    root, options = open_root("av1", where)
    meta = load_meta(open_store(root, **options))
    assert meta.codebase_version == "v3.0" and meta.fps == 10
    assert meta.video_keys == meta.camera_keys == av1_dataset.camera_keys
    assert meta.tasks == list(DEFAULT_TASKS)
    assert meta.total_frames == 82 and meta.total_episodes == 4
    assert meta.stats is not None and meta.stats["index"]["max"].tolist() == [81]
    assert meta.episodes_files == av1_dataset.episodes_files  # http probes, others list
    _check_table(meta, av1_dataset)
    ep2 = meta.episodes[2]
    assert ep2.dataset_from_index == 32 and ep2.dataset_to_index == 72
    assert ep2.data_path == "data/chunk-000/file-001.parquet"
    assert ep2.videos[av1_dataset.camera_keys[1]].from_timestamp == 0.0


def test_paths_and_episode_stats(av1_dataset):
    meta = load_meta(open_store(str(av1_dataset.root)))
    assert meta.data_path(0, 7) == "data/chunk-000/file-007.parquet"
    assert (
        meta.video_path("observation.images.cam_1", 1, 2)
        == "videos/observation.images.cam_1/chunk-001/file-002.mp4"
    )
    stats = meta.episode_stats(1)
    assert stats["action"]["count"].tolist() == [20]
    assert stats[av1_dataset.camera_keys[0]]["mean"].shape == (3, 1, 1)


def test_select_episodes(av1_dataset):
    table = load_meta(open_store(str(av1_dataset.root))).episodes
    sub = table.select([3, 1, 3])
    assert sub.episode_index.tolist() == [1, 3]  # storage order, deduplicated
    assert sub.length.tolist() == [20, 10]
    assert sub[3].dataset_from_index == 72 and sub.num_frames == 30
    assert table.select(None) is table
    assert sub["dataset_from_index"].tolist() == [12, 72]  # LeRobot-style column access
    with pytest.raises(KeyError):
        sub["stats"]
    with pytest.raises(EpisodeFormatError, match=r"episodes \[7\] not in the dataset"):
        table.select([1, 7])


@pytest.fixture
def dataset_copy(av1_dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(av1_dataset.root, root)
    return root


def _edit_info(root, **changes):
    info = json.loads((root / "meta/info.json").read_text())
    info.update(changes)
    (root / "meta/info.json").write_text(json.dumps(info))


def _one_line_error(root, match: str) -> str:
    with pytest.raises(EpisodeFormatError, match=match) as err:
        load_meta(open_store(str(root)))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_info_json(dataset_copy):
    (dataset_copy / "meta/info.json").unlink()
    message = _one_line_error(dataset_copy, "not found")
    assert "meta/info.json" in message


@pytest.mark.parametrize("version", ["v2.1", "v2.0", "v4.0", None, 3])
def test_unknown_codebase_version(dataset_copy, version):
    _edit_info(dataset_copy, codebase_version=version)
    message = _one_line_error(dataset_copy, "codebase_version")
    assert "meta/info.json" in message and "v3" in message


def test_v3_minor_versions_are_accepted(dataset_copy):
    _edit_info(dataset_copy, codebase_version="v3.1")
    assert load_meta(open_store(str(dataset_copy))).codebase_version == "v3.1"


@pytest.mark.parametrize(
    ("key", "template"),
    [
        ("data_path", "../../outside/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        ("data_path", "/etc/chunk-{chunk_index}/{file_index}.parquet"),
        ("video_path", "videos/../../{video_key}/{chunk_index}-{file_index}.mp4"),
        ("video_path", "http://elsewhere.example/{video_key}/{chunk_index}/{file_index}.mp4"),
    ],
)
def test_templates_escaping_the_root(dataset_copy, key, template):
    _edit_info(dataset_copy, **{key: template})
    message = _one_line_error(dataset_copy, "escapes the dataset root")
    assert key in message and "meta/info.json" in message


def test_template_with_unknown_placeholder(dataset_copy):
    _edit_info(dataset_copy, data_path="data/{shard}/file.parquet")
    _one_line_error(dataset_copy, "cannot be filled")


def test_missing_keys_and_bad_json(dataset_copy):
    info = json.loads((dataset_copy / "meta/info.json").read_text())
    del info["fps"]
    (dataset_copy / "meta/info.json").write_text(json.dumps(info))
    _one_line_error(dataset_copy, "'fps' is missing")
    (dataset_copy / "meta/info.json").write_text("{not json")
    _one_line_error(dataset_copy, "not valid JSON")


def test_inconsistent_episode_rows(dataset_copy):
    path = dataset_copy / "meta/episodes/chunk-000/file-001.parquet"
    table = pq.read_table(path)
    lengths = table.column("length").to_numpy().copy()
    lengths[0] += 1
    table = table.set_column(table.column_names.index("length"), "length", pa.array(lengths))
    pq.write_table(table, path)
    _one_line_error(dataset_copy, "episode 3 has length 11 but rows")


def test_total_episodes_mismatch(dataset_copy):
    _edit_info(dataset_copy, total_episodes=5)
    _one_line_error(dataset_copy, "total_episodes=5")


def test_probing_names_a_missing_episodes_file(av1_dataset, nginx_server):
    root = nginx_server.root / "episodes-format-missing"
    shutil.copytree(av1_dataset.root, root)
    (root / "meta/episodes/chunk-000/file-001.parquet").unlink()
    with pytest.raises(EpisodeFormatError, match="file-001.parquet: not found") as err:
        load_meta(open_store(f"{nginx_server.url}/episodes-format-missing"))
    assert "\n" not in str(err.value)


def test_tasks_with_pandas_index_column(dataset_copy):
    # pandas' to_parquet keeps the "task" index as a column; older files may name it __index_level_0__
    table = pa.table({"task_index": [2, 0, 1], "__index_level_0__": ["c", "a", "b"]})
    pq.write_table(table, dataset_copy / "meta/tasks.parquet")
    assert load_meta(open_store(str(dataset_copy))).tasks == ["a", "b", "c"]


def test_resolve_template_normalises():
    info = {
        "data_path": "data/./chunk-{chunk_index:03d}/../chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    }
    assert (
        resolve_template(info, "data_path", chunk_index=1, file_index=2)
        == "data/chunk-001/file-002.parquet"
    )
    with pytest.raises(EpisodeFormatError, match="missing"):
        resolve_template({}, "video_path", video_key="k", chunk_index=0, file_index=0)


def test_episode_table_is_picklable(av1_dataset):
    import pickle

    table = load_meta(open_store(str(av1_dataset.root))).episodes
    copy = pickle.loads(pickle.dumps(table))
    assert copy[2] == table[2]
    assert np.array_equal(
        copy.from_timestamp[av1_dataset.camera_keys[0]],
        table.from_timestamp[av1_dataset.camera_keys[0]],
    )


@pytest.mark.parametrize(("total_frames", "match"), [(10**6, "total_frames=1000000 but"), (-5, "total_frames -5")])
def test_total_frames_must_match_the_episodes(dataset_copy, total_frames, match):
    _edit_info(dataset_copy, total_frames=total_frames)
    assert "meta/info.json" in _one_line_error(dataset_copy, match)


def test_fps_disagreeing_with_the_timestamps(dataset_copy):
    _edit_info(dataset_copy, fps=30)  # the videos and their timestamps are at 10 fps
    message = _one_line_error(dataset_copy, "fps")
    assert "meta/info.json" in message


def test_fps_disagreeing_with_the_episode_timestamps(dataset_copy):
    info = json.loads((dataset_copy / "meta/info.json").read_text())
    for ft in info["features"].values():
        ft.get("info", {}).pop("video.fps", None)
    info["fps"] = 30
    (dataset_copy / "meta/info.json").write_text(json.dumps(info))
    message = _one_line_error(dataset_copy, "to_timestamp - from_timestamp")
    assert "meta/episodes/chunk-000/file-000.parquet" in message and "episode 0 " in message


def test_episode_duration_disagreeing_with_its_length(dataset_copy):
    """to_timestamp one frame late: the episode's frames would be read shifted."""
    path = dataset_copy / "meta/episodes/chunk-000/file-001.parquet"
    table = pq.read_table(path)
    column = "videos/observation.images.cam_0/to_timestamp"
    values = table.column(column).to_numpy().copy()
    values[0] += 0.1
    table = table.set_column(table.column_names.index(column), column, pa.array(values))
    pq.write_table(table, path)
    message = _one_line_error(dataset_copy, "episode 3 camera observation.images.cam_0")
    assert "meta/episodes/chunk-000/file-001.parquet" in message


def test_damaged_episode_files_read_at_once_name_the_first(dataset_copy):
    """The meta/episodes files are read a few at once; the error is still the first damaged
    file's, in file order, whichever read finished first."""
    files = sorted((dataset_copy / "meta/episodes").rglob("*.parquet"))
    assert len(files) >= 2
    for path in files:
        path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(EpisodeFormatError, match=files[0].name) as err:
        load_meta(open_store(str(dataset_copy)))
    assert "\n" not in str(err.value)


def test_a_store_that_cannot_list_reads_each_episodes_file_once(av1_dataset, nginx_server, tmp_path, monkeypatch):
    """Over HTTP the meta/episodes files are found by reading them in order: no footer is
    fetched twice (probing first, then reading, did), and the table is the listed one's."""
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    name = "episodes-format-once"
    root = nginx_server.root / name
    shutil.copytree(av1_dataset.root, root)
    start = len(nginx_server.log_lines())
    meta = load_meta(open_store(f"{nginx_server.url}/{name}"))
    served: dict[str, int] = {}
    for line in nginx_server.log_lines()[start:]:
        request, rest = line[1:].split('" ', 1)
        path = request.split()[1]
        status, sent = rest.split()[:2]
        if f"/{name}/meta/episodes/" in path and status != "404":  # a 404: the end, found
            served[path] = served.get(path, 0) + int(sent)
    files = sorted((root / "meta/episodes").rglob("*.parquet"))
    assert len(served) == len(files) >= 2
    for path in files:
        url_path = f"/{name}/{path.relative_to(root).as_posix()}"
        assert served[url_path] <= path.stat().st_size  # every byte at most once
    listed = load_meta(open_store(str(root)))
    assert np.array_equal(meta.episodes.episode_index, listed.episodes.episode_index)
    assert meta.episodes_files == listed.episodes_files
