"""A streaming epoch rides out a real server outage, and ends with one line past ``outage_s``.

The server is a private nginx (not the session's), really stopped (its process exits, the port
refuses connections) and started again on the same port, while the epoch is between episodes:
the admission budget holds about one episode, so the next one is fetched during the outage.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator

import pytest
import torch

from feedline.episodes import EpisodeDataset
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset
from feedline.io import StoreUnavailableError
from tests.episodes.stream.test_dataset import DELTAS, _global_index, assert_same_sample
from tests.servers import NginxServer, run_nginx

OUTAGE_S = 3.0


@pytest.fixture(scope="module")
def private_nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxServer]:
    with run_nginx(tmp_path_factory.mktemp("nginx-outage")) as server:
        yield server


@pytest.fixture
def root(private_nginx: NginxServer, av1_dataset: SyntheticDataset) -> str:
    target = private_nginx.root / "av1"
    if not target.exists():
        shutil.copytree(av1_dataset.root, target)
    if private_nginx.proc.poll() is not None:
        private_nginx.start()
    return f"{private_nginx.url}/av1"


def _streaming(root: str, outage_s: float) -> StreamingEpisodeDataset:
    probe = StreamingEpisodeDataset(root=root)
    largest = max(probe.episode_bytes.values())
    return StreamingEpisodeDataset(  # room for one episode: the next is fetched after a release
        root=root, delta_timestamps=DELTAS, episode_pool_size=1, prefetch_episodes=0,
        byte_budget_gb=1.2 * largest / 2**30, decode_threads=1, decoded_queue_size=1,
        max_num_shards=1, outage_s=outage_s,
    )


def _keys(items: list[dict]) -> list[tuple[int, int]]:
    return [(int(i["episode_index"]), int(i["frame_index"])) for i in items]


def test_epoch_rides_out_a_restart_and_equals_the_clean_epoch(private_nginx, root, caplog):
    caplog.set_level(logging.INFO, logger="feedline.io.retry")
    clean = list(_streaming(root, 30.0))
    ds = _streaming(root, 30.0)
    got: list[dict] = []
    restart: threading.Timer | None = None
    stopped_at = 0.0
    for item in ds:
        got.append(item)
        if len(got) == 3:  # inside the first episode; the rest is fetched later
            private_nginx.stop()
            stopped_at = time.monotonic()
            restart = threading.Timer(OUTAGE_S, private_nginx.start)
            restart.start()
    assert restart is not None
    restart.join()
    took = time.monotonic() - stopped_at
    assert took >= OUTAGE_S, "the epoch waited for the server"
    # Sample for sample the uninterrupted epoch: none lost, none repeated, same order and values.
    assert _keys(got) == _keys(clean) and len(got) == ds.num_frames
    for a, b in zip(got, clean, strict=True):
        for key, value in b.items():
            assert torch.equal(a[key], value) if isinstance(value, torch.Tensor) else a[key] == value
    ref = EpisodeDataset(root=root, delta_timestamps=DELTAS)
    first = _global_index(ref)
    for item in got:
        assert_same_sample(item, ref, first)
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    recovered = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert len(warnings) == 1 and private_nginx.url in warnings[0], warnings
    assert "retrying for up to 30 s" in warnings[0]
    assert len(recovered) == 1 and private_nginx.url in recovered[0], recovered


def test_outage_past_outage_s_ends_the_epoch_with_one_line_naming_the_store(private_nginx, root):
    ds = _streaming(root, 2.0)
    seen = 0
    stopped_at = 0.0
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            for _item in ds:
                seen += 1
                if seen == 3:
                    private_nginx.stop()
                    stopped_at = time.monotonic()
        waited = time.monotonic() - stopped_at
    finally:
        if private_nginx.proc.poll() is not None:
            private_nginx.start()
    message = str(caught.value)
    assert 2.0 <= waited < 2.0 + 3.0, waited
    assert "\n" not in message and private_nginx.url in message and "outage_s=2" in message, message
    assert "refused" in message.lower(), message
