"""Each resident frame decoded once (within the decoded-frame limit), and persistent workers.

Real PyAV-encoded datasets (AV1, and H.264 with B-frames), real DataLoader workers; every
streamed sample is compared with the map-style reader's sample of the same frame.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset
from tests.episodes.stream.test_dataset import (
    CAM0,
    DELTAS,
    TrackedRun,
    _global_index,
    _key,
    assert_same_sample,
)
from tests.streaming.resume_harness import check_resume


def _deltas(synth: SyntheticDataset) -> dict:
    return {k: v for k, v in DELTAS.items() if k != CAM0 or CAM0 in synth.camera_keys}


def _frame_bytes(ds: StreamingEpisodeDataset) -> int:
    sample = EpisodeDataset(root=ds.root_url, return_uint8=True)[0]
    return max(int(sample[key].numel()) for key in ds.video_keys)


@pytest.mark.parametrize("name", ["av1", "h264"])
def test_each_frame_is_decoded_once_when_the_limit_fits(name, request):
    synth: SyntheticDataset = request.getfixturevalue(f"{name}_dataset")
    root = str(synth.root)
    ref = EpisodeDataset(root=root, delta_timestamps=_deltas(synth))
    ds = StreamingEpisodeDataset(
        root=root, delta_timestamps=_deltas(synth), episode_pool_size=2, decode_threads=2
    )
    first = _global_index(ref)
    seen = [_key(item) for item in ds if assert_same_sample(item, ref, first) is None]
    assert sorted(seen) == [synth.locate(i) for i in range(synth.total_frames)]
    metrics = ds.metrics()
    cameras = len(ds.video_keys)
    assert metrics["delivered_frames"] == synth.total_frames * cameras
    assert metrics["decoded_per_delivered"] == 1.0
    assert metrics["redecoded_frames"] == 0
    # one per (episode, camera), a second where a sample asked for frames before the first one's GOP
    assert len(synth.episode_lengths) * cameras <= metrics["decoder_opens"] <= 2 * len(synth.episode_lengths) * cameras
    assert 0 < metrics["peak_decoded_bytes"] <= int(ds.decoded_cache_gb * 2**30)


@pytest.mark.parametrize("name", ["av1", "h264"])
def test_a_tiny_limit_re_decodes_never_exceeds_it_and_stays_equal(name, request):
    synth: SyntheticDataset = request.getfixturevalue(f"{name}_dataset")
    root = str(synth.root)
    ref = EpisodeDataset(root=root, delta_timestamps=_deltas(synth))
    probe = StreamingEpisodeDataset(root=root)
    limit = 3 * _frame_bytes(probe) + 1  # three frames (per rank; one worker)
    ds = StreamingEpisodeDataset(
        root=root, delta_timestamps=_deltas(synth), episode_pool_size=2, decode_threads=2,
        decoded_cache_gb=limit / 2**30, decoder_cache_size=1,
    )
    first = _global_index(ref)
    seen = [_key(item) for item in ds if assert_same_sample(item, ref, first) is None]
    assert sorted(seen) == [synth.locate(i) for i in range(synth.total_frames)]
    metrics = ds.metrics()
    assert 0 < metrics["peak_decoded_bytes"] <= limit
    assert metrics["redecoded_frames"] > 0 and metrics["decoded_per_delivered"] > 1.0
    assert metrics["decoder_opens"] > len(synth.episode_lengths) * len(ds.video_keys)
    nothing = StreamingEpisodeDataset(root=root, delta_timestamps=_deltas(synth), decoded_cache_gb=0)
    assert [_key(item) for item in nothing if assert_same_sample(item, ref, first) is None]
    assert nothing.metrics()["peak_decoded_bytes"] == 0


class PersistentRun(TrackedRun):
    """A training loop over one DataLoader with lerobot-train's worker settings
    (``persistent_workers=True``, ``prefetch_factor=4``): the same two worker processes serve
    every epoch; ``close()`` shuts them down."""

    def __init__(self, root: str, epochs: int) -> None:
        self._loader: DataLoader | None = None

        def loader(ds: StreamingEpisodeDataset) -> DataLoader:
            if self._loader is None:
                self._loader = DataLoader(
                    ds, batch_size=3, num_workers=2, persistent_workers=True, prefetch_factor=4,
                    timeout=120,
                )
            return self._loader

        super().__init__(lambda: StreamingEpisodeDataset(
            root=root, delta_timestamps={CAM0: [-0.1, 0.0]}, episode_pool_size=2, seed=3,
        ), loader, epochs)

    def load_state_dict(self, state: Mapping) -> None:
        super().load_state_dict(state)  # the same persistent workers read the resumed position

    def close(self) -> None:
        super().close()
        iterator = getattr(self._loader, "_iterator", None)
        if iterator is not None:
            iterator._shutdown_workers()
        self._loader = None


def test_persistent_workers_cover_every_epoch_and_resume_exactly(av1_dataset):
    root = str(av1_dataset.root)
    everything = [av1_dataset.locate(i) for i in range(av1_dataset.total_frames)]
    whole = PersistentRun(root, epochs=3)
    full = list(whole)
    whole.close()
    lengths = [whole.ds.batches_per_rank(3, 2, epoch=e)[0] for e in range(3)]
    assert len(full) == sum(lengths)
    epochs = [full[:lengths[0]], full[lengths[0]:lengths[0] + lengths[1]],
              full[lengths[0] + lengths[1]:]]
    for batches in epochs:
        assert sorted(k for b in batches for k in b) == everything  # each epoch: every frame once
    assert epochs[0] != epochs[1] != epochs[2]  # the workers advanced their epoch
    fresh = TrackedRun(lambda: StreamingEpisodeDataset(
        root=root, delta_timestamps={CAM0: [-0.1, 0.0]}, episode_pool_size=2, seed=3,
    ), lambda ds: DataLoader(ds, batch_size=3, num_workers=2, timeout=120), epochs=3)
    assert list(fresh) == full  # the same order as fresh workers every epoch
    fresh.close()
    inside_second = lengths[0] + lengths[1] // 2
    check_resume(lambda: PersistentRun(root, epochs=3), (inside_second,), full=full)
