"""The synthetic writer produces real LeRobot v3 datasets with identifiable frames."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from feedline.episodes.synth import writer as synth
from feedline.episodes.synth.writer import (
    SynthError,
    SyntheticDataset,
    action_vector,
    decode_identity,
    identity_frame,
    row_identity,
    state_vector,
    write_synthetic_dataset,
)


def _episodes_meta(ds: SyntheticDataset) -> list[dict]:
    rows = []
    for path in ds.episodes_files:
        rows += pq.read_table(ds.root / path).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def _box_offsets(data: bytes) -> dict[str, int]:
    """Top-level MP4 boxes -> offset."""
    out, pos = {}, 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
        out.setdefault(kind.decode("latin-1"), pos)
        if size < 8:
            break
        pos += size
    return out


def test_identity_roundtrip_in_every_layout():
    for camera, episode, frame in [(0, 0, 0), (3, 1999, 999), (15, 16383, 65535), (2, 7, 123)]:
        img = identity_frame(camera, episode, frame, height=48, width=64)
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8
        assert decode_identity(img) == (camera, episode, frame)
        assert decode_identity(np.moveaxis(img, 2, 0)) == (camera, episode, frame)  # CHW
        assert decode_identity(img.astype(np.float32) / 255) == (camera, episode, frame)  # [0, 1]
    big = identity_frame(1, 2, 3, height=240, width=320, noise=0)
    assert decode_identity(big) == (1, 2, 3)


def test_identity_checksum_catches_a_wrong_frame():
    img = identity_frame(1, 2, 3).copy()
    img[:8, :8] = 255 - img[:8, :8]  # flip the first cell
    with pytest.raises(SynthError, match="checksum"):
        decode_identity(img)
    with pytest.raises(SynthError):
        decode_identity(np.zeros((48, 64, 3), np.uint8) + 128)


def test_vectors_identify_rows():
    assert row_identity(state_vector(17, 321)) == (17, 321)
    assert row_identity(action_vector(1999, 999)) == (1999, 999)
    assert state_vector(3, 4).dtype == np.float32


@pytest.mark.parametrize("name", ["av1_dataset", "h264_dataset"])
def test_every_decoded_frame_is_where_the_metadata_says(name, request):
    """Full-file PyAV decode: frame at from_timestamp + timestamp has the right identity."""
    ds: SyntheticDataset = request.getfixturevalue(name)
    rows = _episodes_meta(ds)
    checked = 0
    for cam_id, key in enumerate(ds.camera_keys):
        decoded: dict[str, list[tuple[float, tuple[int, int, int]]]] = {}
        for path in ds.video_files[key]:
            with av.open(str(ds.root / path)) as container:
                decoded[path] = [
                    (frame.time, decode_identity(frame.to_ndarray(format="rgb24")))
                    for frame in container.decode(video=0)
                ]
        for row in rows:
            ep = row["episode_index"]
            path = (
                ds.root
                / "videos"
                / key
                / "chunk-{:03d}/file-{:03d}.mp4".format(
                    row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
                )
            )
            frames = decoded[path.relative_to(ds.root).as_posix()]
            for k in range(row["length"]):
                t = row[f"videos/{key}/from_timestamp"] + float(np.float32(k / ds.fps))
                dist, ident = min((abs(ft - t), ident) for ft, ident in frames)
                assert dist < 1e-4 and ident == (cam_id, ep, k), (key, ep, k)
                checked += 1
            assert row[f"videos/{key}/to_timestamp"] == pytest.approx(
                row[f"videos/{key}/from_timestamp"] + row["length"] / ds.fps
            )
        assert sum(len(v) for v in decoded.values()) == ds.total_frames
    assert checked == ds.total_frames * len(ds.camera_keys)


def test_av1_layout_follows_lerobot_rollover(av1_dataset):
    ds = av1_dataset
    rows = _episodes_meta(ds)
    for key in ds.camera_keys:
        files = [(r[f"videos/{key}/chunk_index"], r[f"videos/{key}/file_index"]) for r in rows]
        assert files == [(0, 0), (0, 0), (0, 1), (0, 2)], files
        # from_timestamp chains inside a file and resets to 0 in a new one
        froms = [r[f"videos/{key}/from_timestamp"] for r in rows]
        assert froms[0] == 0 and froms[1] == pytest.approx(rows[0][f"videos/{key}/to_timestamp"])
        assert froms[2] == 0 and froms[3] == 0
        for i, path in enumerate(ds.video_files[key]):
            data = (ds.root / path).read_bytes()
            boxes = _box_offsets(data)
            if i == 0:  # concatenated: faststart
                assert boxes["moov"] < boxes["mdat"]
            else:  # one episode as recorded: moov at the end
                assert boxes["moov"] > boxes["mdat"]
            with av.open(str(ds.root / path)) as container:
                stream = container.streams.video[0]
                assert stream.codec_context.name in ("libdav1d", "av1")
                packets = [p for p in container.demux(stream) if p.size]
                assert all(p.pts == p.dts for p in packets)  # AV1: no container reordering
                keys = [i for i, p in enumerate(packets) if p.is_keyframe]
                assert keys[:3] == [0, 2, 4]  # GOP 2
    assert [r["data/file_index"] for r in rows] == [0, 0, 1, 1]
    for path in ds.data_files:
        meta = pq.ParquetFile(ds.root / path).metadata
        assert meta.num_row_groups == 2  # one row group per episode
    assert len(ds.episodes_files) == 2


def test_h264_has_real_reordering_and_an_edit_list(h264_dataset):
    ds = h264_dataset
    path, single = ds.video_files[ds.camera_keys[0]]  # episodes 0-1 concatenated, episode 2 alone
    rows = _episodes_meta(ds)
    key = ds.camera_keys[0]
    assert [r[f"videos/{key}/file_index"] for r in rows] == [0, 0, 1]
    assert [r[f"videos/{key}/from_timestamp"] for r in rows] == [0.0, pytest.approx(1.4), 0.0]
    boxes = _box_offsets((ds.root / single).read_bytes())
    assert boxes["moov"] > boxes["mdat"]
    data = (ds.root / path).read_bytes()
    assert b"ctts" in data
    elst = data.index(b"elst")
    version, entries = data[elst + 4], struct.unpack(">I", data[elst + 8 : elst + 12])[0]
    assert version == 0 and entries == 1
    media_time = struct.unpack(">i", data[elst + 16 : elst + 20])[0]
    assert media_time == 2 * 1024  # two B-frames of delay at 10 fps / timescale 10240
    with av.open(str(ds.root / path)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
    reordered = sum(1 for a, b in zip(packets, packets[1:], strict=False) if b.pts < a.pts)
    assert reordered >= 5
    keys = [i for i, p in enumerate(packets) if p.is_keyframe]
    assert {0, ds.episode_lengths[0]} <= set(keys)  # every episode starts on a keyframe
    boxes = _box_offsets(data)
    assert boxes["moov"] < boxes["mdat"]


def test_metadata_files_look_like_lerobot(av1_dataset):
    ds = av1_dataset
    info = json.loads((ds.root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    assert info["total_episodes"] == 4 and info["total_frames"] == 82 and info["total_tasks"] == 3
    cam = info["features"][ds.camera_keys[0]]
    assert cam["dtype"] == "video" and cam["shape"] == [48, 64, 3]
    assert cam["info"]["video.codec"] == "av1" and cam["info"]["video.g"] == 2
    assert list(info["features"])[-5:] == [
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ]
    tasks = pq.read_table(ds.root / "meta/tasks.parquet").to_pydict()
    assert tasks == {"task_index": [0, 1, 2], "task": list(synth.DEFAULT_TASKS)}
    rows = _episodes_meta(ds)
    assert [r["dataset_from_index"] for r in rows] == [0, 12, 32, 72]
    assert [r["dataset_to_index"] for r in rows] == [12, 32, 72, 82]
    assert rows[3]["tasks"] == [synth.DEFAULT_TASKS[0]]
    assert np.asarray(rows[1][f"stats/{ds.camera_keys[0]}/mean"]).shape == (3, 1, 1)
    assert rows[1]["stats/action/count"] == [20]
    assert rows[1]["stats/action/min"] == pytest.approx(action_vector(1, 0).tolist())
    data = pq.read_table(ds.root / ds.data_files[0])
    assert data.schema.field("observation.state").type.list_size == 6
    assert str(data.schema.field("timestamp").type) == "float"
    assert b"huggingface" in data.schema.metadata
    stats = json.loads((ds.root / "meta/stats.json").read_text())
    assert stats["index"]["max"] == [81]


def test_refuses_existing_root_and_bad_arguments(tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(SynthError, match="already exists"):
        write_synthetic_dataset(tmp_path / "exists")
    with pytest.raises(SynthError, match="vcodec"):
        write_synthetic_dataset(tmp_path / "x", vcodec="vp9")
    with pytest.raises(SynthError, match="lengths"):
        write_synthetic_dataset(tmp_path / "x", episodes=2, frames_per_episode=[3])
    with pytest.raises(SynthError, match="frame size"):
        write_synthetic_dataset(tmp_path / "x", width=31)
    with pytest.raises(SynthError, match="bframes"):
        write_synthetic_dataset(tmp_path / "x", bframes=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    calls = []

    def failing(path, frames, fps, enc):
        calls.append(path)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return original(path, frames, fps, enc)

    original = synth.encode_episode
    monkeypatch.setattr(synth, "encode_episode", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        write_synthetic_dataset(tmp_path / "ds", episodes=2, frames_per_episode=3, cameras=2)
    assert list(Path(tmp_path).iterdir()) == []


def test_no_cameras_and_h264_without_bframes(tmp_path):
    ds = write_synthetic_dataset(
        tmp_path / "novideo", episodes=2, frames_per_episode=[3, 4], cameras=0
    )
    info = json.loads((ds.root / "meta/info.json").read_text())
    assert info["video_path"] is None and ds.video_files == {}
    ds2 = write_synthetic_dataset(
        tmp_path / "h264", episodes=2, frames_per_episode=5, cameras=1, vcodec="h264"
    )
    with av.open(str(ds2.root / ds2.video_files[ds2.camera_keys[0]][0])) as container:
        ids = [decode_identity(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    assert ids == [(0, e, k) for e in range(2) for k in range(5)]
