"""EpisodeDataset: LeRobot's map-style semantics, checked frame by frame with decoded identities."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.errors import (
    DeltaTimestampsError,
    EpisodeDatasetError,
    EpisodeFormatError,
    FrameTimestampError,
)
from feedline.episodes.synth.writer import SyntheticDataset, decode_identity, row_identity
from feedline.errors import FeedlineError

CAM0, CAM1 = "observation.images.cam_0", "observation.images.cam_1"
CAM_DELTAS = [-0.2, -0.1, 0.0, 0.1, 0.3]
ACTION_DELTAS = [-0.1, 0.0, 0.1, 0.2]


def _deltas(synth: SyntheticDataset) -> dict[str, list[float]]:
    return {CAM0: CAM_DELTAS, "action": ACTION_DELTAS, "observation.state": [0.0]}


def _expected_window(
    frame: int, length: int, deltas: list[float], fps: int
) -> tuple[list[int], list[bool]]:
    wanted = [frame + round(d * fps) for d in deltas]
    return [min(max(w, 0), length - 1) for w in wanted], [not 0 <= w < length for w in wanted]


def check_sample(item: dict, synth: SyntheticDataset, episode: int, frame: int) -> None:
    """Every field of one sample against what the writer put at (episode, frame)."""
    length, fps = synth.episode_lengths[episode], synth.fps
    from_index = synth.episode_from_index[episode]
    assert int(item["episode_index"]) == episode and int(item["frame_index"]) == frame
    assert int(item["index"]) == from_index + frame
    assert float(item["timestamp"]) == float(np.float32(frame / fps))
    assert item["task"] == synth.episode_tasks[episode]

    frames, pads = _expected_window(frame, length, CAM_DELTAS, fps)
    window = item[CAM0]
    assert window.shape == (len(CAM_DELTAS), 3, 48, 64)
    assert [decode_identity(img) for img in window] == [(0, episode, f) for f in frames]
    assert item[f"{CAM0}_is_pad"].tolist() == pads
    for slot, padded in enumerate(pads):  # a padded slot is the edge frame itself, not zeros
        if padded:
            edge = frames.index(frames[slot])
            assert torch.equal(window[slot], window[edge])
    if CAM1 in synth.camera_keys:
        assert item[CAM1].shape == (3, 48, 64)  # no deltas -> no time dimension, no pad key
        assert decode_identity(item[CAM1]) == (1, episode, frame)
        assert f"{CAM1}_is_pad" not in item

    rows, pads = _expected_window(frame, length, ACTION_DELTAS, fps)
    assert item["action"].shape == (len(ACTION_DELTAS), 6)
    assert [row_identity(a) for a in item["action"]] == [(episode, f) for f in rows]
    assert item["action_is_pad"].tolist() == pads
    assert item["observation.state"].shape == (1, 6)  # a one-slot window keeps T for non-video keys
    assert row_identity(item["observation.state"][0]) == (episode, frame)
    assert item["observation.state_is_pad"].tolist() == [False]


CASES = [
    ("av1", "local"),
    ("av1", "http"),
    ("av1", "s3"),
    ("h264", "local"),
    ("h264", "http"),
    ("h264", "s3"),
    ("h264", "gs"),
    ("av1", "az"),
    ("av1", "hub"),
    ("h264", "hub"),
]


@pytest.mark.parametrize(("name", "where"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_every_sample_of_every_episode(name, where, open_root, request):
    synth: SyntheticDataset = request.getfixturevalue(f"{name}_dataset")
    root, options = open_root(name, where)
    ds = EpisodeDataset(root=root, storage_options=options, delta_timestamps=_deltas(synth))
    assert len(ds) == ds.num_frames == synth.total_frames
    assert ds.num_episodes == len(synth.episode_lengths) and ds.fps == synth.fps
    assert ds.camera_keys == synth.camera_keys
    for i in range(len(ds)):
        episode, frame = synth.locate(i)
        assert ds.locate(i)[:2] == (episode, frame)
        check_sample(ds[i], synth, episode, frame)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_sample_layout_like_lerobot(av1_dataset):
    ds = EpisodeDataset(
        root=str(av1_dataset.root), delta_timestamps={CAM0: [-0.1, 0.0], "action": [0.0, 0.1]}
    )
    item = ds[12]  # episode 1, frame 0
    assert list(item) == [
        CAM0,
        CAM1,
        "observation.state",
        "action",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
        f"{CAM0}_is_pad",
        "action_is_pad",
        "task",
    ]  # video keys, Parquet columns, pads, task (LeRobot 0.6.1's order)
    assert item[CAM0].dtype == torch.float32 and item[CAM0].min() >= 0.0 and item[CAM0].max() <= 1.0
    assert item["timestamp"].dtype == torch.float32 and item["timestamp"].shape == ()
    assert item["index"].dtype == torch.int64 and item["task_index"].shape == ()
    assert item[f"{CAM0}_is_pad"].dtype == torch.bool
    u8 = EpisodeDataset(
        root=str(av1_dataset.root), return_uint8=True, delta_timestamps={CAM0: [-0.1, 0.0]}
    )[12]
    assert u8[CAM0].dtype == torch.uint8 and u8[CAM0].shape == (2, 3, 48, 64)
    assert torch.equal((item[CAM0] * 255).round().to(torch.uint8), u8[CAM0])
    # a one-slot video window is squeezed, as LeRobot's frames.squeeze(0) does
    single = EpisodeDataset(root=str(av1_dataset.root), delta_timestamps={CAM0: [-0.1]})[13]
    assert single[CAM0].shape == (3, 48, 64) and decode_identity(single[CAM0]) == (0, 1, 0)
    assert single[f"{CAM0}_is_pad"].tolist() == [False]
    # samples never alias the dataset's rows
    item["action"][0, 0] = -1.0
    assert ds[12]["action"][0, 0] != -1.0


def test_episode_selection(av1_dataset):
    ds = EpisodeDataset(
        root=str(av1_dataset.root), episodes=[3, 1], delta_timestamps=_deltas(av1_dataset)
    )
    assert ds.episodes == [1, 3] and ds.num_episodes == 2 and len(ds) == 30
    got = [ds.locate(i)[:2] for i in range(len(ds))]
    assert got == [(1, k) for k in range(20)] + [(3, k) for k in range(10)]
    for i in (0, 19, 20, 29):
        episode, frame = got[i]
        check_sample(ds[i], av1_dataset, episode, frame)
    with pytest.raises(EpisodeFormatError, match=r"episodes \[9\] not in the dataset"):
        EpisodeDataset(root=str(av1_dataset.root), episodes=[9])


def test_image_transforms_apply_to_cameras(av1_dataset):
    calls = []

    def flip(images: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(images.shape))
        return images.flip(-1)

    ds = EpisodeDataset(
        root=str(av1_dataset.root), image_transforms=flip, delta_timestamps={CAM0: [-0.1, 0.0]}
    )
    item = ds[5]
    assert calls == [(2, 3, 48, 64), (3, 48, 64)]  # whole window stack, then the other camera
    assert decode_identity(item[CAM1].flip(-1)) == (1, 0, 5)
    with pytest.raises(EpisodeDatasetError, match="callable"):
        EpisodeDataset(root=str(av1_dataset.root), image_transforms="flip")


def _collect(loader) -> list[tuple[int, int, tuple, tuple]]:
    seen = []
    for batch in loader:
        for j in range(len(batch["index"])):
            seen.append(
                (
                    int(batch["episode_index"][j]),
                    int(batch["frame_index"][j]),
                    decode_identity(batch[CAM1][j]),
                    tuple(decode_identity(img) for img in batch[CAM0][j]),
                )
            )
    return seen


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_with_two_workers(context, av1_dataset, av1_http):
    ds = EpisodeDataset(root=av1_http, delta_timestamps={CAM0: [-0.1, 0.0, 0.1]})
    ds[0]  # the parent has live connections and an index; workers must reopen their own
    loader = DataLoader(
        ds,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=context,
        timeout=120,
        generator=torch.Generator().manual_seed(0),
    )
    seen = _collect(loader)
    assert sorted((e, f) for e, f, _, _ in seen) == [av1_dataset.locate(i) for i in range(len(ds))]
    for episode, frame, cam1, cam0 in seen:
        assert cam1 == (1, episode, frame)
        frames, _ = _expected_window(
            frame, av1_dataset.episode_lengths[episode], [-0.1, 0.0, 0.1], 10
        )
        assert cam0 == tuple((0, episode, f) for f in frames)
    assert isinstance(next(iter(DataLoader(ds, batch_size=2)))["task"], list)


def test_pickles_without_connections(av1_dataset, av1_http):
    ds = EpisodeDataset(root=av1_http, delta_timestamps={CAM0: [0.0, 0.1]})
    ds[3]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._store is None  # the frame reader comes with its index, without a store
    assert copy._frame_reader is not None and copy._frame_reader.store is None
    check = copy[3]
    assert [decode_identity(img) for img in check[CAM0]] == [(0, 0, 3), (0, 0, 4)]


# ------------------------------------------------------------------ bad inputs ---


@pytest.fixture
def broken_copy(av1_dataset, tmp_path):
    root = tmp_path / "broken"
    shutil.copytree(av1_dataset.root, root)
    return root


def _one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message
    return message


def test_missing_info_json(broken_copy):
    (broken_copy / "meta/info.json").unlink()
    with pytest.raises(EpisodeFormatError) as err:
        EpisodeDataset(root=str(broken_copy))
    assert "meta/info.json: not found" in _one_line(err)


def test_unknown_codebase_version(broken_copy):
    info = json.loads((broken_copy / "meta/info.json").read_text())
    info["codebase_version"] = "v2.1"
    (broken_copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(EpisodeFormatError) as err:
        EpisodeDataset(root=str(broken_copy))
    assert "meta/info.json" in _one_line(err) and "'v2.1'" in str(err.value)


def test_video_template_escaping_the_root(broken_copy):
    info = json.loads((broken_copy / "meta/info.json").read_text())
    info["video_path"] = "../{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    (broken_copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(EpisodeFormatError) as err:
        EpisodeDataset(root=str(broken_copy))
    assert "escapes the dataset root" in _one_line(err) and "video_path" in str(err.value)


def test_frames_outside_tolerance_are_an_error(broken_copy):
    """A from_timestamp off by half a frame finds no frame within tolerance_s: error, not a wrong frame."""
    path = broken_copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    col = f"videos/{CAM0}/from_timestamp"
    values = table.column(col).to_numpy().copy()
    values[1] += 0.05
    table = table.set_column(table.column_names.index(col), col, pa.array(values))
    pq.write_table(table, path)
    ds = EpisodeDataset(root=str(broken_copy))
    decode_identity(ds[0][CAM0])  # episode 0 is untouched
    with pytest.raises(FrameTimestampError) as err:
        ds[12]
    assert "file-000.mp4" in _one_line(err)
    relaxed = EpisodeDataset(root=str(broken_copy), tolerance_s=0.06)
    assert decode_identity(relaxed[12][CAM0])[1] == 1  # within a loose tolerance: nearest frame


def test_bad_delta_timestamps(av1_dataset):
    with pytest.raises(DeltaTimestampsError, match="not multiples of 1/fps"):
        EpisodeDataset(root=str(av1_dataset.root), delta_timestamps={CAM0: [0.05]})
    with pytest.raises(DeltaTimestampsError, match="unknown feature"):
        EpisodeDataset(
            root=str(av1_dataset.root), delta_timestamps={"observation.images.nope": [0.0]}
        )


def test_source_arguments():
    with pytest.raises(EpisodeDatasetError, match="give repo_id"):
        EpisodeDataset()
    with pytest.raises(EpisodeDatasetError, match="OWNER/NAME"):
        EpisodeDataset("just-a-name")
    with pytest.raises(EpisodeDatasetError, match="repo_type 'model'"):
        EpisodeDataset("owner/name", repo_type="model")


def test_repo_ids_resolve_to_hub_urls():
    from feedline.episodes.mapstyle import resolve_root

    assert resolve_root("lerobot/pusht", None, "dataset", None) == "hf://datasets/lerobot/pusht"
    assert (
        resolve_root("lerobot/pusht", None, "dataset", "v3.0") == "hf://datasets/lerobot/pusht@v3.0"
    )
    assert resolve_root("me/bucket", None, "bucket", None) == "hf://buckets/me/bucket"
    assert resolve_root("ignored/id", "s3://b/ds", "dataset", None) == "s3://b/ds"


def test_hub_repo_id_offline_is_a_clear_error(monkeypatch):
    """repo_id reads hf://datasets/<repo_id>; without network the error is one line naming it."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FeedlineError) as err:
        EpisodeDataset("feedline-test/not-a-dataset", revision="v3.0")
    assert "hf://datasets/feedline-test/not-a-dataset@v3.0" in _one_line(err)


def test_shared_assembly_pieces(av1_dataset):
    """The pieces the streaming reader shares: episode rows, the sample spec, the video times."""
    from feedline.episodes.assemble import assemble_sample, video_timestamps

    ds = EpisodeDataset(root=str(av1_dataset.root), delta_timestamps={CAM0: [-0.1, 0.0, 0.1]})
    episode = ds.episode_data(1)
    assert episode.length == 20 and episode.dataset_to_index == 32
    stamps = video_timestamps(ds.sample_spec, episode, 19)
    from_ts = ds.meta.episodes[1].videos[CAM0].from_timestamp
    assert stamps[CAM0] == [from_ts + float(np.float32(f / 10)) for f in (18, 19, 19)]
    assert stamps[CAM1] == [from_ts + float(np.float32(1.9))]
    calls = []

    def decode(key, path, times):
        calls.append((key, path, times))
        return ds.frame_reader().frames_at(path, times)

    item = assemble_sample(ds.sample_spec, episode, 19, decode)
    assert [c[0] for c in calls] == [CAM0, CAM1]
    assert all(torch.equal(item[k], ds[31][k]) for k in (CAM0, CAM1, "action", f"{CAM0}_is_pad"))
    with pytest.raises(IndexError):
        assemble_sample(ds.sample_spec, episode, 20, decode)


@pytest.mark.parametrize("name", ["av1", "h264"])
def test_pixels_equal_whole_file_pyav_decode(name, request):
    """Every camera frame of every sample equals the nearest frame of a whole-file PyAV decode."""
    from tests.episodes.oracle import decode_all

    synth: SyntheticDataset = request.getfixturevalue(f"{name}_dataset")
    ds = EpisodeDataset(root=str(synth.root), return_uint8=True)
    truth = {
        path: decode_all(synth.root / path)
        for key in synth.camera_keys
        for path in synth.video_files[key]
    }
    for i in range(len(ds)):
        item = ds[i]
        episode = ds.meta.episodes[int(item["episode_index"])]
        for key in synth.camera_keys:
            span = episode.videos[key]
            t = span.from_timestamp + float(item["timestamp"])
            dist, j = min((abs(ft - t), j) for j, (ft, _) in enumerate(truth[span.path]))
            assert dist < 1e-4
            assert np.array_equal(item[key].permute(1, 2, 0).numpy(), truth[span.path][j][1]), (
                i,
                key,
            )


def test_remote_videos_are_read_by_ranges_not_downloaded(nginx_server):
    """Over HTTP a sample fetches the moov and the GOP it needs, never the whole MP4."""
    import re

    from feedline.episodes.synth.writer import write_synthetic_dataset

    name = "episodes-ranges-only"
    synth = write_synthetic_dataset(
        nginx_server.root / name,
        episodes=3,
        frames_per_episode=40,
        cameras=1,
        width=320,
        height=240,
        noise=40,
    )
    (video,) = synth.video_files[CAM0]
    size = (synth.root / video).stat().st_size
    assert size > 500_000
    before = len(nginx_server.log_lines())
    ds = EpisodeDataset(root=f"{nginx_server.url}/{name}", episodes=[1])
    assert decode_identity(ds[7][CAM0]) == (0, 1, 7)
    log = nginx_server.log_lines()[before:]
    lines = [line for line in log if f"/{name}/{video}" in line]
    sent = sum(int(re.search(r'" \d{3} (\d+) ', line).group(1)) for line in lines)
    assert lines and not any(" 200 " in line for line in lines if line.startswith('"GET'))
    assert sent < size / 10, (sent, size)
