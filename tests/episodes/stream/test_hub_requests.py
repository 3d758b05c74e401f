"""Hub requests of a streaming epoch with DataLoader workers: each large file is located once
per rank process, before the workers fork, so the count does not grow with the worker count
(bench/hub_requests.py measures N ranks x K workers; docs/episodes.md states the figures)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from feedline.episodes import StreamingEpisodeDataset
from feedline.io import hub as hub_module
from tests.hubserver import HubServer

CAM0 = "observation.images.cam_0"


def _resolves(hub: HubServer, method: str) -> collections.Counter[str]:
    return collections.Counter(
        p.split("/resolve/", 1)[1].split("/", 1)[1] for _m, p, _r, _a in hub.hub_requests() if
        "/resolve/" in p and _m == method
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_each_large_file_is_located_once_per_rank_whatever_the_workers(
    workers: int, hub: HubServer, av1_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = f"feedline/requests-{workers}"
    sha = hub.add_dataset(repo, Path(av1_dataset.root))
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))  # a cold node
    monkeypatch.setattr(hub_module, "_LOCATIONS", {})  # a fresh rank process
    monkeypatch.setattr(hub_module, "_TREES", {})
    hub.clear()
    ds = StreamingEpisodeDataset(repo, delta_timestamps={CAM0: [0.0]}, episode_pool_size=2)
    loader = DataLoader(ds, batch_size=8, num_workers=workers, timeout=120 if workers else 0)
    samples = sum(len(batch["index"]) for batch in ds.track(loader))
    assert samples == av1_dataset.total_frames
    large = {p for p, b in hub.repos[repo].commits[sha].blobs.items() if b.sha256}
    located = _resolves(hub, "HEAD")
    assert set(located) == large and set(located.values()) == {1}  # once each, workers or not
    assert set(_resolves(hub, "GET")) == {"meta/info.json", "meta/stats.json"}  # small files, read directly
    api = collections.Counter(p.split("?")[0].split("/")[-2] for _m, p, _r, _a in hub.hub_requests() if
                              p.startswith("/api/"))
    assert api == {"revision": 2, "tree": 1}  # main and the sidecar branch; the tree once
