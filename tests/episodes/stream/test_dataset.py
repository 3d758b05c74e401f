"""StreamingEpisodeDataset against the map-style oracle: same samples, exact coverage, exact resume.

Every streamed sample must equal ``EpisodeDataset`` at the same global index (frames, windows,
pad masks, task), over a local folder, nginx, S3, GCS and Azure, AV1 and H.264 with B-frames; one epoch through
a real DataLoader (0 and 2 workers, world size 2) covers every frame exactly once; a checkpoint
after k batches resumes with exactly the remaining samples in order; the byte budget holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.errors import EpisodeTooLargeError, ResumeMismatchError, StreamingError
from feedline.episodes.stream import payload as payload_module
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, decode_identity
from feedline.streaming.schedule.plan import plan_shards
from feedline.streaming.schedule.resume import ResumePosition
from tests.streaming.resume_harness import TrackedRun as Harnessed
from tests.streaming.resume_harness import check_resume

CAM0 = "observation.images.cam_0"
DELTAS = {CAM0: [-0.2, -0.1, 0.0, 0.1], "action": [-0.1, 0.0, 0.2], "observation.state": [0.0]}


def _global_index(ref: EpisodeDataset) -> dict[int, int]:
    """episode -> map-style position of its first frame."""
    starts = np.concatenate([[0], np.cumsum(ref.episode_table.length)])
    return {int(e): int(starts[i]) for i, e in enumerate(ref.episode_table.episode_index)}


def assert_same_sample(item: dict, ref: EpisodeDataset, first: dict[int, int]) -> None:
    expected = ref[first[int(item["episode_index"])] + int(item["frame_index"])]
    assert list(item) == list(expected)
    for key, value in expected.items():
        got = item[key]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and got.shape == value.shape, key
            assert torch.equal(got, value), f"{key} differs at {int(item['index'])}"
        else:
            assert got == value, key


def _unbatch(batch: dict) -> list[dict]:
    n = len(batch["index"])
    return [{k: (v[j] if not isinstance(v, list) else v[j]) for k, v in batch.items()}
            for j in range(n)]


def _key(item: dict) -> tuple[int, int]:
    return int(item["episode_index"]), int(item["frame_index"])


CASES = [("av1", "local"), ("av1", "http"), ("h264", "local"), ("h264", "http"), ("h264", "s3"),
         ("h264", "gs"), ("av1", "az"), ("av1", "hub")]


@pytest.mark.parametrize(("name", "where"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_every_streamed_sample_equals_map_style(name, where, open_root, request):
    synth: SyntheticDataset = request.getfixturevalue(f"{name}_dataset")
    root, options = open_root(name, where)
    deltas = {k: v for k, v in DELTAS.items() if k != CAM0 or CAM0 in synth.camera_keys}
    ref = EpisodeDataset(root=root, delta_timestamps=deltas, storage_options=options)
    largest = max(
        StreamingEpisodeDataset(root=root, storage_options=options).episode_bytes.values()
    )
    ds = StreamingEpisodeDataset(  # room for about two episodes: admission waits for releases
        root=root, storage_options=options, delta_timestamps=deltas, episode_pool_size=2,
        prefetch_episodes=1,
        byte_budget_gb=2.2 * largest / 2**30, decode_threads=2, decoded_queue_size=4,
    )
    first = _global_index(ref)
    seen = []
    for item in ds:
        assert_same_sample(item, ref, first)
        seen.append(_key(item))
    assert sorted(seen) == [synth.locate(i) for i in range(synth.total_frames)]
    metrics = ds.metrics()
    assert metrics["samples"] == synth.total_frames
    assert metrics["episodes_fetched"] == len(synth.episode_lengths)
    assert 0 < metrics["bytes_fetched"] <= sum(ds.episode_bytes.values())
    assert metrics["peak_reserved_bytes"] <= ds.rank_budget_bytes
    assert metrics["outside_fetches"] == 0


def _epoch(ds: StreamingEpisodeDataset, loader: DataLoader, limit: int | None = None) -> list:
    batches = []
    for batch in ds.track(loader):
        batches.append([_key(item) for item in _unbatch(batch)])
        if limit is not None and len(batches) == limit:
            break
    return batches


def _loader(ds, workers: int, batch_size: int = 4) -> DataLoader:
    return DataLoader(ds, batch_size=batch_size, num_workers=workers, timeout=120 if workers else 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_epoch_covers_every_frame_once_over_two_ranks(workers, av1_dataset, av1_http):
    ref = EpisodeDataset(root=av1_http, delta_timestamps=DELTAS)
    first = _global_index(ref)
    seen: list[tuple[int, int]] = []
    repeats = 0
    for rank in range(2):
        ds = StreamingEpisodeDataset(
            root=av1_http, delta_timestamps=DELTAS, rank=rank, world_size=2,
            episode_pool_size=2, byte_budget_gb=0.01,
        )
        assert len(ds) == ds.rank_frames(0)
        expected_batches = ds.batches_per_rank(4, workers)
        assert len(set(expected_batches)) == 1  # evened out: every rank the same
        repeats += ds.evened_anchors(workers)["repeated"]
        mine, batches = [], 0
        for batch in ds.track(_loader(ds, workers)):
            batches += 1
            for item in _unbatch(batch):  # collated in the worker, compared here
                assert_same_sample(item, ref, first)
                mine.append(_key(item))
        assert len(mine) == ds.rank_samples(0, workers) and batches == expected_batches[rank]
        assert ds.epoch == 1  # the tracked loop ran to the end: the next epoch is next
        seen += mine
    every = [av1_dataset.locate(i) for i in range(av1_dataset.total_frames)]
    assert set(seen) == set(every) and len(seen) - len(every) == repeats


def test_spawned_workers(av1_dataset, av1_http):
    """Spawned workers get their own stores and readers, and report into the shared counters."""
    ds = StreamingEpisodeDataset(root=av1_http, delta_timestamps={CAM0: [0.0]}, episode_pool_size=2)
    loader = DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context="spawn",
                        timeout=120)
    seen = []
    for batch in ds.track(loader):
        for item in _unbatch(batch):
            assert decode_identity(item[CAM0]) == (0, *_key(item))
            seen.append(_key(item))
    assert sorted(seen) == [av1_dataset.locate(i) for i in range(av1_dataset.total_frames)]
    assert ds.metrics()["samples"] == av1_dataset.total_frames
    assert ds.metrics()["episodes_fetched"] == len(av1_dataset.episode_lengths)


def _keys(batch: dict) -> list[tuple[int, int]]:
    return [_key(item) for item in _unbatch(batch)]


class TrackedRun(Harnessed):
    """The shared harness's training loop, each batch as (episode, frame) keys."""

    def __init__(self, make: Callable[[], StreamingEpisodeDataset],
                 loader: Callable[[StreamingEpisodeDataset], DataLoader], epochs: int = 2) -> None:
        super().__init__(make, loader, _keys, epochs)


def test_resume_after_k_batches_yields_exactly_the_rest(av1_dataset, av1_http):
    """Two real workers, batch 3, drop_last off: stop after k batches (mid-epoch, at the end of
    the epoch, early in the next), resume from a JSON checkpoint, and run on into the next epoch."""

    def make() -> TrackedRun:
        return TrackedRun(lambda: StreamingEpisodeDataset(
            root=av1_http, delta_timestamps={CAM0: [0.0]}, episode_pool_size=2, seed=5,
        ), lambda ds: _loader(ds, 2, 3))

    whole = make()
    full = list(whole)
    first_len = whole.ds.batches_per_rank(3, 2, epoch=0)[0]
    first_epoch, second_epoch = full[:first_len], full[first_len:]
    assert len(second_epoch) == whole.ds.batches_per_rank(3, 2, epoch=1)[0]
    assert sorted(k for b in first_epoch for k in b) == sorted(k for b in second_epoch for k in b)
    assert first_epoch != second_epoch  # a new epoch, a new order

    def saved(k: int, state: Mapping) -> None:
        epoch, taken = (0, k) if k <= first_len else (1, k - first_len)
        assert (state["epoch"], state["batches_consumed_on_rank"]) == (epoch, taken)

    stops = (1, 7, first_len - 1, first_len, first_len + 1)
    check_resume(make, stops, full=full, on_state=saved)


@pytest.mark.parametrize(("strategy", "drop_last"), [("remaining", False), ("round_robin", True)])
def test_resume_in_process_and_refusals(strategy, drop_last, av1_dataset, av1_http):
    def make(**kw) -> StreamingEpisodeDataset:
        return StreamingEpisodeDataset(
            root=av1_http, episode_pool_size=3, sampling_strategy=strategy, **kw
        )

    def loader(ds, batch_size=5):
        return DataLoader(ds, batch_size=batch_size, drop_last=drop_last)

    def run() -> TrackedRun:
        return TrackedRun(make, loader)

    whole = run()
    both = list(whole)
    epoch_len = whole.ds.batches_per_rank(5, 0, drop_last, epoch=0)[0]
    assert len(both) == epoch_len + whole.ds.batches_per_rank(5, 0, drop_last, epoch=1)[0]
    full = both[:epoch_len]
    flat = sorted(k for b in full for k in b)
    everything = [av1_dataset.locate(i) for i in range(av1_dataset.total_frames)]
    if drop_last:
        assert len(flat) == 5 * (len(everything) // 5) and set(flat) <= set(everything)
    else:
        assert flat == everything
    # in process: mid-epoch (after 4 batches), at the epoch's end, and into the next epoch
    check_resume(run, (4, epoch_len, epoch_len + 1), full=both)
    ds = make()
    _epoch(ds, loader(ds), limit=4)
    state = ds.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state  # loaded but not yet iterated: the same checkpoint
    with pytest.raises(ResumeMismatchError, match="seed"):
        make(seed=7).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="pool_settings"):
        make(byte_budget_gb=4).load_state_dict(state)
    other = make()  # another batch size resumes mid-epoch with the anchors not yet consumed
    other.load_state_dict(state)
    rest = [k for b in _epoch(other, loader(other, 4)) for k in b]
    consumed = [k for b in full[:4] for k in b]
    assert not set(rest) & set(consumed) and len(set(rest)) == len(rest)
    if not drop_last:
        assert sorted(consumed + rest) == flat
    with pytest.raises(StreamingError, match="track"):
        make().state_dict()


def test_byte_budget_holds_with_two_workers(av1_dataset):
    root = str(av1_dataset.root)
    largest = max(StreamingEpisodeDataset(root=root).episode_bytes.values())
    budget_gb = 2 * 1.2 * largest / 2**30  # each of 2 workers gets 1.2x the largest episode
    ds = StreamingEpisodeDataset(root=root, byte_budget_gb=budget_gb, episode_pool_size=4)
    total = sum(len(b) for b in _epoch(ds, _loader(ds, 2)))
    assert total == av1_dataset.total_frames
    assert 0 < ds.metrics()["peak_reserved_bytes"] <= ds.rank_budget_bytes // 2
    assert ds.metrics()["samples"] == av1_dataset.total_frames  # summed over both workers


def test_an_episode_over_the_budget_fails_before_any_fetch(av1_dataset, monkeypatch):
    root = str(av1_dataset.root)
    sizes = StreamingEpisodeDataset(root=root).episode_bytes
    fetched = []
    real = payload_module.fetch_episode
    monkeypatch.setattr(
        "feedline.episodes.stream.source.fetch_episode",
        lambda *a, **kw: fetched.append(a[-1].episode_index) or real(*a, **kw),
    )
    big = max(sizes, key=sizes.get)
    with pytest.raises(EpisodeTooLargeError) as err:
        StreamingEpisodeDataset(root=root, byte_budget_gb=0.9 * sizes[big] / 2**30)
    message = str(err.value)
    assert f"episode {big} needs" in message and "raise byte_budget_gb to at least" in message
    assert "streaming_" not in message  # the Python keyword, not the CLI flag
    assert "(1)" in message and "(2)" in message and "(3)" in message and "\n" not in message
    # fits the rank budget, not one worker's half of it: the worker refuses before fetching
    ds = StreamingEpisodeDataset(root=root, byte_budget_gb=1.5 * sizes[big] / 2**30)
    parts = plan_shards(ds.episode_lengths, world_size=1, num_workers=2, seed=ds.seed, epoch=0)[0]
    worker = next(w for w, part in enumerate(parts) if big in part)
    with pytest.raises(EpisodeTooLargeError, match="one DataLoader worker"):
        ds.worker_pipeline(ResumePosition(0, 0, (0, 0), True), 2, worker)
    assert fetched == []


def test_transforms_run_on_the_iterating_thread_and_epochs_differ(av1_dataset):
    threads = set()

    def flip(images: torch.Tensor) -> torch.Tensor:
        threads.add(threading.current_thread().name)
        return images.flip(-1)

    root = str(av1_dataset.root)
    ds = StreamingEpisodeDataset(root=root, image_transforms=flip, episodes=[1, 3])
    items = list(ds)
    assert threads == {threading.current_thread().name}
    assert {int(i["episode_index"]) for i in items} == {1, 3} and len(items) == 30
    for item in items[:3]:
        assert decode_identity(item[CAM0].flip(-1)) == (0, *_key(item))
    order0 = [_key(i) for i in items]
    assert [_key(i) for i in StreamingEpisodeDataset(root=root, episodes=[1, 3])] == order0
    ds.set_epoch(1)
    assert [_key(i) for i in ds] != order0
    with pytest.raises(StreamingError, match=r"unknown sampling_strategy 'random'; choose one of"):
        StreamingEpisodeDataset(root=root, sampling_strategy="random")
    with pytest.raises(StreamingError, match="reduce the number of ranks"):
        StreamingEpisodeDataset(root=root, episodes=[1], rank=0, world_size=2)


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("episode_pool_size", 0, "episode_pool_size must be an integer >= 1, got 0"),
    ("sampling_strategy", "random", "unknown sampling_strategy 'random'; choose one of"),
    ("prefetch_episodes", -1, "prefetch_episodes must be an integer >= 0, got -1"),
    ("byte_budget_gb", 0, "byte_budget_gb must be > 0, got 0"),
    ("decode_threads", 0, "decode_threads must be an integer >= 1, got 0"),
    ("decoded_queue_size", True, "decoded_queue_size must be an integer >= 1, got True"),
    ("max_num_shards", 0, "max_num_shards must be an integer >= 1, got 0"),
    ("world_size", 0, "world_size must be an integer >= 1, got 0"),
])
def test_bad_settings_name_the_keyword_before_any_io(keyword, value, message, tmp_path):
    missing = tmp_path / "no-dataset-here"  # settings are checked before the root is opened
    with pytest.raises(StreamingError) as info:
        StreamingEpisodeDataset(root=missing, **{keyword: value})
    assert message in str(info.value) and "streaming_" not in str(info.value)
