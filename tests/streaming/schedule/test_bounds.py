"""Sizes are bounded before memory is: ``epoch_size``, ``choose`` and ``repeat`` past
``MAX_COPIES`` times the sources' frames are one line at once, in both readers and in
``feedline plan`` (``epoch_size=10**12`` used to end in a ``MemoryError`` after 24 s, ``repeat:
1e6`` in ``feedline plan`` after 217 s)."""

from __future__ import annotations

import time

import pytest

from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.streaming.errors import MixtureError
from feedline.streaming.schedule.mixture import MAX_COPIES
from tests.cli import run_feedline


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    base = tmp_path_factory.mktemp("bounds")
    a = write_synthetic_dataset(base / "a", episodes=3, frames_per_episode=[10, 12, 8])
    b = write_synthetic_dataset(base / "b", episodes=2, frames_per_episode=[14, 12])
    return [str(a.root), str(b.root)]


@pytest.mark.parametrize(
    ("sources", "epoch_size", "match"),
    [
        ([{"weight": 1}, {"weight": 1}], 10**12, "epoch_size=1000000000000 gives"),
        ([{"weight": 1}, {"weight": 1}], 10**7, "epoch_size=10000000 gives"),
        ([{"repeat": 1e6}, {"weight": 1}], None, "repeat 1e\\+06 gives"),
        ([{"choose": 10**9}, {"repeat": 1}], None, "choose 1000000000 gives"),
        ([{"weight": 1000}, {"repeat": 1}], 40 * MAX_COPIES, "weight 1000 of epoch_size"),
    ],
)
def test_episode_mixture_sizes_past_the_bound_are_one_line_at_once(roots, sources, epoch_size, match):
    started = time.monotonic()
    with pytest.raises(MixtureError, match=match) as err:
        StreamingEpisodeDataset(sources=[dict(q, root=r) for q, r in zip(sources, roots, strict=True)],
                                epoch_size=epoch_size, rank=0, world_size=1)
    assert time.monotonic() - started < 10
    assert "\n" not in str(err.value) and f"more than {MAX_COPIES} times" in str(err.value)


def test_an_epoch_within_the_bound_still_opens(roots):
    ds = StreamingEpisodeDataset(sources=[{"root": roots[0], "weight": 1}, {"root": roots[1], "repeat": 2}],
                                 epoch_size=30 * 10, rank=0, world_size=1)
    assert len(ds) == 300


def test_feedline_plan_with_repeat_1e6_is_one_line_at_once(roots, tmp_path):
    mixture = tmp_path / "mixture.yaml"
    mixture.write_text(f"sources:\n  - root: {roots[0]}\n    repeat: 1000000.0\n  - root: {roots[1]}\n")
    started = time.monotonic()
    run = run_feedline("plan", f"--dataset.mixture={mixture}", timeout=120, cwd=tmp_path)
    assert time.monotonic() - started < 60
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "repeat 1e+06 gives" in lines[0], run.stderr
