"""``feedline build-sidecar --push`` to the Hub, end to end against the Hub-contract server, and
a later open on an empty ``$FEEDLINE_HOME`` that uses the published sidecar instead of indexing."""

from __future__ import annotations

from pathlib import Path

import pytest

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes.video.sidecar import HUB_SIDECAR_BRANCH, hub_sidecar_path
from tests.episodes.test_cli import run
from tests.hubserver import HubServer


def _video_requests(hub: HubServer) -> list[tuple[str, str, str | None]]:
    """Every request that read a video's bytes: its resolve on the Hub, or its CDN object."""
    videos = set()
    for repo in hub.repos.values():
        for commit in repo.commits.values():
            videos |= {b.sha256 for p, b in commit.blobs.items() if p.endswith(".mp4")}
    out = []
    for origin, method, path, ranged, _auth in list(hub.requests):
        if (origin == "hub" and "/resolve/" in path and path.endswith(".mp4")) or (
            origin == "cdn" and any(v in path for v in videos)
        ):
            out.append((method, path, ranged))
    return out


def test_push_creates_the_branch_and_a_fresh_machine_uses_it(
    hub: HubServer, av1_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = "feedline/pushed"
    source = hub.add_dataset(repo, Path(av1_dataset.root))
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home-builder"))
    monkeypatch.setenv("HF_TOKEN", "hf_pushtoken")
    assert HUB_SIDECAR_BRANCH not in hub.repos[repo].branches
    code = run(["build-sidecar", "--repo-id", repo, "--output", str(tmp_path / "s.npz"), "--push"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"published to hf://datasets/{repo}@{HUB_SIDECAR_BRANCH}/{hub_sidecar_path(source)}" in out
    branches = hub.repos[repo].branches
    assert branches["main"] == source  # the source branch is untouched
    published = hub.repos[repo].commits[branches[HUB_SIDECAR_BRANCH]]
    assert published.blobs[hub_sidecar_path(source)].file.read_bytes() == (tmp_path / "s.npz").read_bytes()
    assert any(a == "Bearer hf_pushtoken" for _m, p, _r, a in hub.hub_requests() if "/commit/" in p)

    # another machine: an empty $FEEDLINE_HOME, no token; reading main opens the published sidecar
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home-fresh"))
    monkeypatch.delenv("HF_TOKEN")
    hub.clear()
    ds = EpisodeDataset(repo)
    ds.frame_reader()  # the MP4 index: from the published sidecar, not from the videos
    assert _video_requests(hub) == []
    assert ds[0]["episode_index"] == 0  # and a frame read is ranges of the one video it needs
    assert _video_requests(hub) and all(r for m, _p, r in _video_requests(hub) if m == "GET")

    # a second push of the same commit: the branch exists, the commit is another one on it
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home-builder"))
    assert run(["build-sidecar", "--repo-id", repo, "--output", str(tmp_path / "t.npz"), "--push"]) == 0
    assert hub.repos[repo].branches["main"] == source


def test_without_a_published_sidecar_the_videos_are_indexed(
    hub: HubServer, av1_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control of the test above: the same open with no sidecar branch reads every video's
    index boxes (so "no video request" above is the published sidecar's doing)."""
    repo = "feedline/unpublished"
    hub.add_dataset(repo, Path(av1_dataset.root))
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    hub.clear()
    StreamingEpisodeDataset(repo).frame_reader()
    videos = {p for _m, p, _r in _video_requests(hub) if p.startswith("/lfs/")}
    assert len(videos) == sum(len(files) for files in av1_dataset.video_files.values())


def test_push_without_access_is_one_line(
    hub: HubServer, av1_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = "feedline/refused"
    hub.add_dataset(repo, Path(av1_dataset.root))
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    hub.add_fault("status", code=403, count=10, where="/branch/")
    code = run(["build-sidecar", "--repo-id", repo, "--output", str(tmp_path / "s.npz"), "--push"])
    out = capsys.readouterr().out.strip().splitlines()[-1]  # after the build's own "wrote ..."
    assert code == 1 and out.startswith("feedline: error: cannot publish the sidecar") and repo in out
    assert "403" in out
    assert HUB_SIDECAR_BRANCH not in hub.repos[repo].branches
