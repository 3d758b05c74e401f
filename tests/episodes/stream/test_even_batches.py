"""Every rank the same batches (``even_batches``), through real DataLoaders: workers of any
number (batches come from workers in turn), ``drop_last`` either way, and each mode's coverage
in its own terms (``pad``: every frame, the repeats counted; ``drop``: none twice, the dropped
counted). Without evening out (``none``) the same ranks differ, which is what hangs a DDP loop."""

from __future__ import annotations

from collections import Counter

import pytest
from torch.utils.data import DataLoader

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from tests.episodes.stream.test_dataset import _keys

DELTAS = {"action": [0.0, 0.1]}


def _run(root: str, world: int, mode: str, workers: int, batch_size: int, drop_last: bool):
    batches, read, evened = [], Counter(), []
    for rank in range(world):
        ds = StreamingEpisodeDataset(root=root, delta_timestamps=DELTAS, rank=rank, world_size=world,
                                     episode_pool_size=2, even_batches=mode)
        evened.append(ds.evened_anchors(workers))
        expected = ds.batches_per_rank(batch_size, workers, drop_last)[rank]
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, drop_last=drop_last,
                            timeout=120 if workers else 0)
        taken = list(ds.track(loader))
        assert len(taken) == expected, (rank, len(taken), expected)
        batches.append(len(taken))
        for batch in taken:
            read.update(_keys(batch))
        state = ds.state_dict()
        if mode != "none":
            assert state["even_batches"] == mode and state["extra"]["evened"] == evened[-1]
    return batches, read, evened


@pytest.mark.parametrize(("mode", "workers", "drop_last"),
                         [("pad", 0, False), ("pad", 3, True), ("drop", 2, False), ("drop", 3, True)])
def test_every_rank_takes_the_same_batches(av1_dataset, mode, workers, drop_last):
    root = str(av1_dataset.root)
    every = Counter(av1_dataset.locate(i) for i in range(av1_dataset.total_frames))
    batches, read, evened = _run(root, 3, mode, workers, 3, drop_last)
    assert len(set(batches)) == 1, batches
    if drop_last:  # a worker's partial last batch is the DataLoader's to drop, not counted here
        return
    if mode == "pad":
        assert not every - read
        assert sum((read - every).values()) == sum(e["repeated"] for e in evened)
    else:
        assert max(read.values()) == 1 and not read - every
        assert sum((every - read).values()) == sum(e["dropped"] for e in evened)


def test_without_evening_out_the_ranks_differ(av1_dataset):
    batches, read, _ = _run(str(av1_dataset.root), 3, "none", 2, 3, False)
    assert len(set(batches)) > 1  # the case a DDP loop hangs on
    assert read == Counter(av1_dataset.locate(i) for i in range(av1_dataset.total_frames))
