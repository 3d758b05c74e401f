"""Data-parallel groups (``replication=N``): N consecutive ranks read identical samples.

Through real DataLoaders (two worker processes) on a small synthetic dataset: the two ranks of a
group yield the same batches, frame for frame; the groups together cover every frame exactly
once; a world size not divisible by N is refused in one line; and a replicated run resumes
sample-exactly, also as a run of the same group count without replication.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes.errors import StreamingError
from feedline.episodes.settings import cli_message
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, decode_identity
from tests.episodes.stream.test_dataset import TrackedRun, _key, _unbatch
from tests.streaming.resume_harness import check_resume, json_roundtrip

CAM0 = "observation.images.cam_0"
DELTAS = {CAM0: [-0.1, 0.0], "action": [0.0, 0.1]}
WORLD, REPLICATION = 4, 2


def _reader(root: str, rank: int, world: int = WORLD, replication: int = REPLICATION,
            **kw) -> StreamingEpisodeDataset:
    return StreamingEpisodeDataset(
        root=root, delta_timestamps=DELTAS, rank=rank, world_size=world, replication=replication,
        episode_pool_size=2, seed=3, **kw,
    )


def _loader(ds: StreamingEpisodeDataset, batch_size: int = 4) -> DataLoader:
    return DataLoader(ds, batch_size=batch_size, num_workers=2, timeout=120)


@pytest.fixture(scope="module")
def epochs(av1_dataset: SyntheticDataset) -> dict[int, list[dict]]:
    """One tracked epoch of every rank of W=4, N=2: its batches as the DataLoader gave them."""
    out = {}
    for rank in range(WORLD):
        ds = _reader(str(av1_dataset.root), rank)
        out[rank] = list(ds.track(_loader(ds)))
        assert ds.epoch == 1 and len(out[rank]) == ds.batches_per_rank(4, 2, epoch=0)[ds.data_rank]
    return out


def test_ranks_of_one_group_read_identical_streams(epochs: dict[int, list[dict]]) -> None:
    for first in (0, 2):
        mine, mate = epochs[first], epochs[first + 1]
        assert len(mine) == len(mate) > 0
        for a, b in zip(mine, mate, strict=True):  # same anchors, same order, same frames
            assert list(a) == list(b)
            for key, value in a.items():
                same = torch.equal(value, b[key]) if isinstance(value, torch.Tensor) else (
                    value == b[key])
                assert same, key
    assert [_key(i) for b in epochs[0] for i in _unbatch(b)] != [
        _key(i) for b in epochs[2] for i in _unbatch(b)]  # the groups read different data


def test_coverage_is_exact_across_groups(
    epochs: dict[int, list[dict]], av1_dataset: SyntheticDataset
) -> None:
    """Each frame once per epoch over the W/N groups (so N times over the W ranks), but for
    the repeats that even out the groups' batches, which are counted."""
    seen, per_group = [], []
    for rank in (0, 2):  # one rank per group
        for batch in epochs[rank]:
            for item in _unbatch(batch):
                assert decode_identity(item[CAM0][-1]) == (0, *_key(item))  # the frame itself
                seen.append(_key(item))
        per_group.append(sum(len(_unbatch(b)) for b in epochs[rank]))
    every = [av1_dataset.locate(i) for i in range(av1_dataset.total_frames)]
    assert set(seen) == set(every) and len(set(per_group)) == 1
    repeats = sum(_reader(str(av1_dataset.root), rank, world=4, replication=2)
                  .evened_anchors(2)["repeated"] for rank in (0, 2))
    assert len(seen) - len(every) == repeats


def test_a_group_reads_what_its_data_rank_reads_without_replication(
    epochs: dict[int, list[dict]], av1_dataset: SyntheticDataset
) -> None:
    """The planner sees W/N data ranks and rank // N: group 1 of W=4, N=2 is rank 1 of W=2."""
    ds = _reader(str(av1_dataset.root), 1, world=2, replication=1)
    plain = [[_key(i) for i in _unbatch(b)] for b in ds.track(_loader(ds))]
    assert plain == [[_key(i) for i in _unbatch(b)] for b in epochs[3]]


def test_world_not_divisible_by_replication_is_one_line_before_any_io(tmp_path, caplog) -> None:
    missing = tmp_path / "no-dataset-here"
    with pytest.raises(StreamingError) as info:
        StreamingEpisodeDataset(root=missing, rank=0, world_size=6, replication=4)
    message = str(info.value)
    assert message.startswith("world_size 6 is not divisible by replication 4") and (
        "\n" not in message)
    assert "--dataset.streaming_replication 4" in cli_message(message)
    with pytest.raises(StreamingError, match="replication must be an integer >= 1, got 0"):
        StreamingEpisodeDataset(root=missing, replication=0)


def test_replication_is_logged_once(av1_dataset: SyntheticDataset, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="feedline.episodes.stream.dataset"):
        _reader(str(av1_dataset.root), 3)
        _reader(str(av1_dataset.root), 1, world=2, replication=1)
    lines = [r.getMessage() for r in caplog.records if "replication" in r.getMessage()]
    assert lines == [
        "replication 2: rank 3 reads the samples of data-parallel group 1 of 2 (ranks 2..3)"]


def test_a_replicated_run_resumes_sample_exactly(av1_dataset: SyntheticDataset) -> None:
    """Stop rank 3 of W=4, N=2 after k batches (mid-epoch, at its end, in the next epoch): the
    checkpoint records the replication and counts the group; resumed, the rest is exact."""
    root = str(av1_dataset.root)

    def make(rank: int = 3, world: int = WORLD, replication: int = REPLICATION) -> TrackedRun:
        return TrackedRun(lambda: _reader(root, rank, world, replication),
                          lambda ds: _loader(ds, 3))

    whole = make()
    full = list(whole)
    first_len = whole.ds.batches_per_rank(3, 2, epoch=0)[1]

    def saved(k: int, state: Mapping) -> None:
        assert (state["replication"], state["world_size"], state["rank"]) == (2, 2, 1)

    check_resume(make, (2, first_len, first_len + 1), full=full, on_state=saved)

    # The same checkpoint resumes a run of the same group count without replication (rank 1 of
    # W=2) sample-exactly: the groups, not the ranks, fix the order.
    stopped = make()
    taken = [next(stopped) for _ in range(2)]
    state = json_roundtrip(stopped.state_dict())
    stopped.close()
    plain = make(rank=1, world=2, replication=1)
    plain.load_state_dict(state)
    assert taken + list(plain) == full
