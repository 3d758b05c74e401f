"""Requests per fetched episode over nginx, read from its access log: no more than the bytes need.

The open stats each file once (a HEAD over HTTP) and pins it; after the open an episode costs one
ranged GET per data-file range and one per camera, and no HEAD at all, in the training process
or in any DataLoader worker (workers map the index the opening process checked). A file
replaced after the open is still refused, by the reads themselves (``If-Match``, the answer's
size and ETag).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.errors import StreamingError, VideoChangedError
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.episodes.video import sidecar as sidecar_module

LAYOUT = dict(
    episodes=6, frames_per_episode=12, cameras=2, fps=10,
    video_files_size_in_mb=0.03, data_files_size_in_mb=0.012,
)


def _serve(nginx_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    name = f"requests-{uuid.uuid4().hex[:8]}"
    write_synthetic_dataset(Path(nginx_server.root) / name, **LAYOUT)
    return f"{nginx_server.url}/{name}", Path(nginx_server.root) / name


def _tally(nginx_server, name: str, start: int) -> Counter:
    """(method, kind) of the logged requests for ``name`` since line ``start``."""
    time.sleep(0.3)  # nginx logs a request after its last byte: let the last ones land
    out: Counter = Counter()
    for line in nginx_server.log_lines()[start:]:
        method, path = line[1:].split()[:2]
        if f"/{name}/" not in path:
            continue
        kind = "mp4" if path.endswith(".mp4") else "data" if "/data/" in path else "meta"
        out[(method, kind)] += 1
    return out


def test_a_streamed_epoch_costs_one_get_per_range_and_no_head(nginx_server, tmp_path, monkeypatch) -> None:
    url, root = _serve(nginx_server, tmp_path, monkeypatch)
    name = root.name
    ds = StreamingEpisodeDataset(root=url, seed=3)
    opened = len(nginx_server.log_lines())
    frames = sum(len(b["index"]) for b in DataLoader(ds, batch_size=4, num_workers=2))
    assert frames == ds.num_frames
    seen = _tally(nginx_server, name, opened)
    episodes, cameras = len(ds.episode_table), len(ds.camera_keys)
    assert seen[("HEAD", "data")] == seen[("HEAD", "mp4")] == seen[("HEAD", "meta")] == 0, seen
    assert seen[("GET", "mp4")] == episodes * cameras, seen
    assert seen[("GET", "data")] == episodes, seen  # one row-group range each
    assert sum(seen.values()) == episodes * (1 + cameras), seen


def test_a_data_file_replaced_after_the_open_is_refused(nginx_server, tmp_path, monkeypatch) -> None:
    url, root = _serve(nginx_server, tmp_path, monkeypatch)
    ds = StreamingEpisodeDataset(root=url, seed=3, episode_pool_size=1, prefetch_episodes=0)
    data = root / ds.episode_table.data_path[0]
    replaced = data.with_suffix(".new")
    replaced.write_bytes(data.read_bytes() + b"\0" * 10)  # another object, another size
    os.replace(replaced, data)
    with pytest.raises(StreamingError) as err:
        for _ in ds:
            pass
    message = str(err.value)
    assert "changed since the dataset was opened" in message and data.name in message, message


def test_a_video_replaced_after_the_open_is_refused_without_a_head(nginx_server, tmp_path, monkeypatch) -> None:
    url, root = _serve(nginx_server, tmp_path, monkeypatch)
    ds = EpisodeDataset(root=url)
    video = ds.episode_table.video_path[ds.camera_keys[0]][0]
    target = root / video
    replaced = target.with_suffix(".new")
    replaced.write_bytes(target.read_bytes() + b"\0" * 16)  # another size, so another ETag
    os.replace(replaced, target)
    start = len(nginx_server.log_lines())
    with pytest.raises(VideoChangedError) as err:
        ds[0]
    assert video in str(err.value) and "changed since the dataset was opened" in str(err.value)
    seen = _tally(nginx_server, root.name, start)
    assert seen[("HEAD", "mp4")] == 0, seen


def test_map_style_builds_the_sidecar_once_not_in_workers(nginx_server, tmp_path, monkeypatch) -> None:
    """The constructor builds and checks the index; two DataLoader workers reuse it: no build,
    no listing, no HEAD and no MP4 header read in either."""
    url, root = _serve(nginx_server, tmp_path, monkeypatch)
    builds = tmp_path / "builds.log"
    original = sidecar_module.write_sidecar

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003 - forwarded
        with builds.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(sidecar_module, "write_sidecar", counted)
    ds = EpisodeDataset(root=url)
    assert builds.read_text().splitlines() == [str(os.getpid())]  # built in the constructor
    assert list((tmp_path / "home" / "mp4-sidecars").rglob("sidecar-v3.npz"))
    opened = len(nginx_server.log_lines())
    loader = DataLoader(ds, batch_size=6, num_workers=2, shuffle=False)
    assert sum(len(b["index"]) for b in loader) == len(ds)
    assert builds.read_text().splitlines() == [str(os.getpid())]  # and never again
    seen = _tally(nginx_server, root.name, opened)
    assert seen[("HEAD", "mp4")] == 0 and seen[("HEAD", "data")] == 0, seen
    assert seen[("GET", "data")] == 0, seen  # the rows were read by the constructor
