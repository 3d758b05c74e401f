"""TokenDataset through the floor's one resume harness, the same one the episode reader runs.

Stops at many points over two epochs (mid-epoch, either side of the epoch's end, in the next
epoch), each checkpoint through a JSON round trip and resumed twice (a second checkpoint in the
middle of the resumed run), in process and with real DataLoader workers, a mixture, and elastic
changes of world size, workers and batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from feedline.streaming.errors import PlanError
from feedline.text import TokenDataset, TokenSource
from tests.streaming.resume_harness import TrackedRun, check_elastic, check_resume, resume_points

SEQ = 31
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _windows(batch: dict[str, Any]) -> list[int]:
    return [int(i) for i in batch["window_index"]]


def _pairs(batch: dict[str, Any]) -> list[tuple[int, int]]:
    return [(int(s), int(w)) for s, w in zip(batch["source_index"], batch["window_index"], strict=True)]


def _loader(batch_size: int, workers: int = 0):
    return lambda ds: DataLoader(ds, batch_size=batch_size, num_workers=workers, timeout=120 if workers else 0)


def _stops(total: int, first_end: int, random_count: int) -> list[int]:
    """The harness's stops but 0: a checkpoint needs the tracked loop to have started."""
    return [k for k in resume_points(total, [first_end], random_count=random_count) if k]


def _epoch_ends(run: TrackedRun, batch_size: int) -> list[int]:
    first = sum(run.ds.batches_per_rank(batch_size, 0, epoch=0))
    return [first, first + sum(run.ds.batches_per_rank(batch_size, 0, epoch=1))]


def test_resume_at_many_stops_in_process(tokens_root: Path) -> None:
    def make() -> TrackedRun:
        return TrackedRun(lambda: TokenDataset(tokens_root, SEQ, chunk_windows=8, pool_size=6, seed=3,
                                               return_index=True), _loader(16), _windows)

    whole = make()
    full = list(whole)
    ends = _epoch_ends(whole, 16)
    assert len(full) == ends[-1]
    epoch = sorted(k for b in full[: ends[0]] for k in b)
    assert epoch == list(range(whole.ds.windows)) == sorted(k for b in full[ends[0]:] for k in b)

    def saved(k: int, state: dict) -> None:
        assert (state["epoch"], state["batches_consumed_on_rank"]) == (
            (0, k) if k <= ends[0] else (1, k - ends[0])
        )

    check_resume(make, _stops(ends[-1], ends[0], 6), full=full, on_state=saved)


def test_resume_with_two_workers_and_a_strategy(tokens_root: Path) -> None:
    def make() -> TrackedRun:
        return TrackedRun(lambda: TokenDataset(tokens_root, SEQ, chunk_windows=8, pool_size=4,
                                               sampling_strategy="round_robin", return_index=True),
                          _loader(12, 2), _windows)

    whole = make()
    full = list(whole)
    first = _epoch_ends(whole, 12)[0]
    check_resume(make, (7, first, first + 1), full=full)


def test_a_mixture_resumes_at_many_stops(tokens_root: Path, second_root: Path) -> None:
    def make() -> TrackedRun:
        return TrackedRun(lambda: TokenDataset(
            [TokenSource(str(tokens_root), weight=1), TokenSource(str(second_root), choose=100)],
            SEQ, chunk_windows=8, epoch_size=600, return_index=True,
        ), _loader(10), _pairs)

    whole = make()
    full = list(whole)
    ends = _epoch_ends(whole, 10)
    check_resume(make, _stops(ends[-1], ends[0], 3), full=full)


@pytest.mark.parametrize(("before", "after"), [((2, 2, 4), (3, 1, 5)), ((3, 1, 4), (2, 2, 6))])
def test_elastic_resume_covers_the_rest_once(tokens_root: Path, before: tuple, after: tuple) -> None:
    def make(rank: int, world: int) -> TokenDataset:
        return TokenDataset(tokens_root, SEQ, rank=rank, world_size=world, chunk_windows=8,
                            return_index=True)

    everything = list(range(make(0, 1).windows))
    world, workers, batch = before
    resumed = check_elastic(make, (world, _loader(batch, workers)),
                            (after[0], _loader(after[2], after[1])), _windows, 25, everything)
    assert all(ds.epoch == 1 for ds in resumed)


def test_resume_on_more_ranks_than_remaining_chunks_is_the_token_readers_error(tokens_root: Path) -> None:
    """The plan's refusal names TokenDataset and its chunks, the remaining ones of the epoch
    (it spoke of "selected episode(s)")."""
    ds = TokenDataset(tokens_root, SEQ, chunk_windows=8)
    stop = sum(ds.batches_per_rank(8, 0, epoch=0)) - 2
    for n, _ in enumerate(ds.track(DataLoader(ds, batch_size=8)), 1):
        if n == stop:
            break
    world = 100
    resumed = TokenDataset(tokens_root, SEQ, chunk_windows=8, rank=0, world_size=world)
    resumed.load_state_dict(ds.state_dict())
    with pytest.raises(PlanError) as err:
        list(resumed.track(DataLoader(resumed, batch_size=8)))
    message = str(err.value)
    assert message.startswith("TokenDataset: ") and "remaining chunk(s) of epoch 0" in message, message
    assert f"cannot give each of {world} ranks a whole chunk" in message and "episode" not in message
