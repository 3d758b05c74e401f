"""The sidecar cache is keyed by the dataset's identity, not by the URL it is served from.

The same files behind two nginx servers (two ports) find one archive: the second open parses no
video. A video replaced behind one of them makes another identity, and only it is parsed again;
another revision never shares the entry.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from feedline.episodes import EpisodeDataset
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.episodes.video import sidecar as sidecar_module
from feedline.episodes.video.sidecar import cache_path, current_objects, dataset_identity
from feedline.io import open_store
from tests.servers import run_nginx


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every MP4 indexed from its own bytes (its moov parsed), by URL."""
    seen: list[str] = []
    original = sidecar_module.read_table

    def counting(read, size, name):  # noqa: ANN001
        seen.append(name)
        return original(read, size, name)

    monkeypatch.setattr(sidecar_module, "read_table", counting)
    return seen


def test_same_dataset_on_two_servers_builds_the_sidecar_once(
    nginx_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parsed: list[str]
) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    name = f"identity-{uuid.uuid4().hex[:8]}"
    served = Path(nginx_server.root) / name
    write_synthetic_dataset(served, episodes=3, frames_per_episode=10, cameras=2, fps=10)
    with run_nginx(tmp_path / "second") as second:
        shutil.copytree(served, Path(second.root) / name)  # copy2: same sizes and mtimes, so same ETags
        first_url, second_url = f"{nginx_server.url}/{name}", f"{second.url}/{name}"
        assert first_url != second_url

        first = EpisodeDataset(root=first_url)
        videos = first.episode_table.video_files()
        assert sorted(parsed) == sorted(f"{first_url}/{v}" for v in videos)
        parsed.clear()
        again = EpisodeDataset(root=second_url)
        assert parsed == []  # the other server's archive, found by identity
        a, b = open_store(first_url), open_store(second_url)
        current = current_objects(b, videos)
        assert dataset_identity(a, None, current_objects(a, videos)) == dataset_identity(b, None, current)
        assert cache_path(a, None, current_objects(a, videos)) == cache_path(b, None, current)
        assert again[0]["index"] == first[0]["index"]

        # a replaced MP4 behind one server: another identity, and only that video is parsed
        victim = Path(second.root) / name / videos[0]
        data = victim.read_bytes()
        tmp = victim.with_suffix(".new")
        tmp.write_bytes(data + b"\0" * 8)
        os.replace(tmp, victim)
        changed = current_objects(b, videos)
        assert dataset_identity(b, None, changed) != dataset_identity(b, None, current)
        EpisodeDataset(root=second_url)
        assert parsed == [f"{second_url}/{videos[0]}"]

        # another revision never shares an entry
        parsed.clear()
        assert cache_path(a, "v2", current_objects(a, videos)) != cache_path(a, None, current_objects(a, videos))


def test_a_store_without_fingerprints_keys_by_its_root(nginx_server, tmp_path: Path) -> None:
    """Without ETags nothing identifies the content: the URL stays part of the key."""
    name = f"identity-noetag-{uuid.uuid4().hex[:8]}"
    served = Path(nginx_server.root) / name
    write_synthetic_dataset(served, episodes=1, frames_per_episode=5, cameras=1, fps=10)
    plain, noetag = open_store(f"{nginx_server.url}/{name}"), open_store(f"{nginx_server.noetag_url}/{name}")
    video = [p.relative_to(served).as_posix() for p in served.rglob("*.mp4")]
    blind = current_objects(noetag, video)
    assert all(info.fingerprint is None for info in blind.values())
    assert dataset_identity(noetag, None, blind) != dataset_identity(plain, None, blind)
