"""A mixture's open walks its units with arrays and dict passes, not one lookup per unit: the
byte sizes the size check walks, the reader's unit lengths and the task list are what the
per-unit lookups gave, and a unit larger than the budget is still refused by name."""

from __future__ import annotations

import collections
import sys

import pytest

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.stream.source import UnitBytes
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.streaming.errors import StreamingError


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    base = tmp_path_factory.mktemp("open")
    a = write_synthetic_dataset(base / "a", episodes=5, frames_per_episode=[10, 12, 8, 9, 11])
    b = write_synthetic_dataset(base / "b", episodes=3, frames_per_episode=[14, 12, 18], fps=20)
    return [str(a.root), str(b.root)]


def _open(roots: list[str], **kwargs) -> StreamingEpisodeDataset:
    return StreamingEpisodeDataset(
        sources=[{"root": roots[0], "weight": 2}, {"root": roots[1], "repeat": 1.5}],
        rank=0,
        world_size=1,
        **kwargs,
    )


def test_the_open_gives_what_per_unit_lookups_give(roots: list[str]) -> None:
    ds = _open(roots)
    units = ds.feed.units
    generic = UnitBytes(units, ds.feed.sources)  # the unit-by-unit mapping
    assert list(ds.episode_bytes) == list(generic)
    assert list(ds.episode_bytes.items()) == [(u, generic[u]) for u in generic]
    assert len(ds.episode_bytes) == len(generic) == 8
    assert ds.episode_lengths == {
        units.unit(i, e): n
        for i, s in enumerate(ds.feed.sources)
        for e, n in s.episode_lengths.items()
    }
    tasks: list[str] = []
    for s in ds.feed.sources:
        tasks.extend(t for t in s.reader.meta.tasks if t not in tasks)
    assert ds.meta.tasks == tasks


def test_a_unit_larger_than_the_budget_is_refused_by_name(roots: list[str]) -> None:
    largest = max(
        UnitBytes(_open(roots).feed.units, _open(roots).feed.sources).items(),
        key=lambda item: item[1],
    )
    with pytest.raises(StreamingError, match=str(largest[0])):
        _open(roots, byte_budget_gb=largest[1] / 2**30 * 0.99)


def test_the_open_locates_no_unit_one_by_one(roots: list[str]) -> None:
    calls: collections.Counter = collections.Counter()

    def count(frame, event, arg) -> None:
        if event == "call":
            calls[frame.f_code.co_name] += 1

    sys.setprofile(count)
    try:
        _open(roots)
    finally:
        sys.setprofile(None)
    assert calls["locate"] == 0 and calls["unit"] == 0, calls
