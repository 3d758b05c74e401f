"""Mixtures on real datasets: exact per-source counts, samples equal to each source's own
map-style reader, the union schema's pads, aggregated stats, and resume (same and other world).

The sources differ as robot datasets do: another fps (10 and 20), another state width (6 and 4),
a camera only one of them has, and in one test another image size.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes.errors import MixtureError, ResumeMismatchError
from feedline.episodes.mapstyle import EpisodeDataset
from feedline.episodes.mixture.sources import Source, load_mixture
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

DELTAS = {"action": [-0.1, 0.0, 0.1], "observation.images.cam_0": [-0.1, 0.0]}
Key = tuple[int, int, int]  # (dataset_index, episode, frame)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SyntheticDataset]:
    base = tmp_path_factory.mktemp("mixture")
    return {
        "a": write_synthetic_dataset(
            base / "a", episodes=5, frames_per_episode=[10, 12, 8, 9, 11], cameras=1, fps=10
        ),
        "b": write_synthetic_dataset(
            base / "b", episodes=3, frames_per_episode=[14, 12, 18],
            cameras=["observation.images.cam_0", "observation.images.wrist"], fps=20,
            state_dim=4,
        ),
        "small": write_synthetic_dataset(
            base / "small", episodes=1, frames_per_episode=[4], cameras=1, width=32, height=24
        ),
    }


def _mixture(sources: dict[str, SyntheticDataset], **kwargs: Any) -> StreamingEpisodeDataset:
    spec = kwargs.pop("spec", [{"root": str(sources["a"].root), "weight": 2},
                               {"root": str(sources["b"].root), "weight": 1}])
    options = {"delta_timestamps": DELTAS, "rank": 0, "world_size": 1, "episode_pool_size": 4,
               "seed": 5, **kwargs}
    return StreamingEpisodeDataset(sources=spec, **options)


def _keys(batch: dict[str, Any]) -> list[Key]:
    return list(zip(batch["dataset_index"].tolist(), batch["episode_index"].tolist(),
                    batch["frame_index"].tolist(), strict=True))


def _epoch(ds: StreamingEpisodeDataset, loader: DataLoader, batches: int | None = None) -> list[Key]:
    seen: list[Key] = []
    iterator = ds.track(loader)
    for n, batch in enumerate(iterator, 1):
        seen += _keys(batch)
        if n == batches:
            break
    iterator.close()  # type: ignore[attr-defined]
    return seen


def _check_counts(seen: list[Key], counts: list[int], lengths: list[list[int]]) -> None:
    uses = Counter(seen)
    for s, want in enumerate(counts):
        frames = [uses[(s, e, f)] for e, n in enumerate(lengths[s]) for f in range(n)]
        assert sum(frames) == want, f"source {s}"
        assert max(frames) - min(frames) <= 1, f"source {s}: uneven use {Counter(frames)}"


@pytest.mark.parametrize(
    ("quotas", "epoch_size", "counts"),
    [
        ([{"weight": 3}, {"weight": 1}], 60, [45, 15]),
        ([{"repeat": 1.5}, {"repeat": 0.5}], None, [75, 22]),
        ([{"choose": 13}, {"choose": 70}], None, [13, 70]),
    ],
)
def test_each_source_gives_exactly_its_count_every_epoch_through_two_workers(
    sources: dict[str, SyntheticDataset], quotas: list[dict[str, Any]], epoch_size: int | None,
    counts: list[int],
) -> None:
    spec = [{"root": str(sources[k].root), **q} for k, q in zip("ab", quotas, strict=True)]
    ds = _mixture(sources, spec=spec, epoch_size=epoch_size)
    assert ds.feed.counts == counts
    lengths = [sources["a"].episode_lengths, sources["b"].episode_lengths]
    loader = DataLoader(ds, batch_size=4, num_workers=2, timeout=120)
    epochs = [_epoch(ds, loader) for _ in range(2)]
    for seen in epochs:
        _check_counts(seen, counts, lengths)
    if quotas[0].get("choose"):  # a window of the cycle each epoch: the two epochs differ
        assert {k for k in epochs[0] if k[0] == 0} != {k for k in epochs[1] if k[0] == 0}


def test_samples_equal_each_sources_map_style_reader_with_the_union_pads(
    sources: dict[str, SyntheticDataset],
) -> None:
    ds = _mixture(sources, spec=[str(sources["a"].root), str(sources["b"].root)])
    maps = [EpisodeDataset(root=str(sources[k].root), delta_timestamps=DELTAS) for k in "ab"]
    loader = DataLoader(ds, batch_size=None, num_workers=2, timeout=120)
    seen = 0
    for sample in ds.track(loader):
        s = int(sample["dataset_index"])
        own = maps[s][int(sample["index"])]
        for key, value in own.items():
            got = sample[key]
            if isinstance(value, torch.Tensor) and key in ("observation.state", "action"):
                width = value.shape[-1]
                assert torch.equal(got[..., :width], value), key
                assert not got[..., width:].any(), f"{key}: padding is not zeros"
                assert got.shape[-1] == 6
            elif isinstance(value, torch.Tensor):
                assert torch.equal(got, value), key
            else:
                assert got == value, key
        wrist = sample["observation.images.wrist"]
        assert wrist.shape == (3, 48, 64)
        if s == 0:  # a has no wrist camera: zeros, flagged
            assert bool(sample["observation.images.wrist_is_pad"]) and not wrist.any()
        else:
            assert not bool(sample["observation.images.wrist_is_pad"])
        seen += 1
    assert seen == sources["a"].total_frames + sources["b"].total_frames
    assert ds.meta.features["observation.state"]["shape"] == [6]
    assert "observation.images.wrist" in ds.meta.camera_keys


def test_stats_are_the_sources_stats_weighted_by_their_counts(
    sources: dict[str, SyntheticDataset],
) -> None:
    ds = _mixture(sources, spec=[{"root": str(sources["a"].root), "choose": 30},
                                 {"root": str(sources["b"].root), "choose": 10}])
    own = [json.loads((Path(sources[k].root) / "meta/stats.json").read_text()) for k in "ab"]
    a, b = (np.asarray(o["observation.state"]["mean"]) for o in own)
    b = np.concatenate([b, np.zeros(2)])
    np.testing.assert_allclose(ds.meta.stats["observation.state"]["mean"], 0.75 * a + 0.25 * b)
    sa, sb = (np.asarray(o["observation.state"]["std"]) for o in own)
    sb = np.concatenate([sb, np.zeros(2)])
    mean = 0.75 * a + 0.25 * b
    var = 0.75 * (sa**2 + (a - mean) ** 2) + 0.25 * (sb**2 + (b - mean) ** 2)
    np.testing.assert_allclose(ds.meta.stats["observation.state"]["std"], np.sqrt(var))
    assert ds.meta.stats["observation.images.wrist"] is not None  # from b alone
    assert len(ds.meta.source_stats) == 2


def test_mixture_resume_is_sample_exact_and_elastic_and_refuses_a_changed_weight(
    sources: dict[str, SyntheticDataset], caplog: pytest.LogCaptureFixture,
) -> None:
    full = _mixture(sources)
    whole = _epoch(full, DataLoader(full, batch_size=3, num_workers=0))
    first = _mixture(sources)
    consumed = _epoch(first, DataLoader(first, batch_size=3, num_workers=0), batches=5)
    state = first.state_dict()
    again = _mixture(sources)
    again.load_state_dict(state)
    rest = _epoch(again, DataLoader(again, batch_size=3, num_workers=0))
    assert consumed + rest == whole  # same topology: identical to the run not interrupted
    ranks = [_mixture(sources, rank=r, world_size=2) for r in range(2)]
    for ds in ranks:
        ds.load_state_dict(state)
    repeats = sum(ds.evened_anchors(2)["repeated"] for ds in ranks)
    other = [k for ds in ranks for k in _epoch(ds, DataLoader(ds, batch_size=2, num_workers=2,
                                                              timeout=120))]
    # elastic: none skipped, repeated only to even out the two ranks (a mixture's own repeats
    # are in ``whole``)
    extra = Counter(consumed) + Counter(other)
    extra.subtract(Counter(whole))
    assert min(extra.values()) >= 0 and sum(extra.values()) == repeats
    changed = _mixture(sources, spec=[{"root": str(sources["a"].root), "weight": 1},
                                      {"root": str(sources["b"].root), "weight": 1}])
    with pytest.raises(ResumeMismatchError, match="mixture"):
        changed.load_state_dict(state)


def test_a_mixture_file_and_one_line_errors_that_name_the_sources(
    sources: dict[str, SyntheticDataset], tmp_path: Path,
) -> None:
    a, small = str(sources["a"].root), str(sources["small"].root)
    with pytest.raises(MixtureError, match="feature_map") as err:
        _mixture(sources, spec=[a, small], delta_timestamps=None)
    assert a in str(err.value) and small in str(err.value) and "\n" not in str(err.value)
    renamed = _mixture(sources, spec=[a, Source(root=small, feature_map={
        "observation.images.cam_0": "observation.images.top"})], delta_timestamps=None)
    assert {"observation.images.cam_0", "observation.images.top"} <= set(renamed.meta.features)
    with pytest.raises(MixtureError, match=r"source 0 .*10 fps.*whole frames"):
        _mixture(sources, spec=[a], delta_timestamps={"action": [0.05]})
    with pytest.raises(MixtureError, match=r"source 1 \(.*missing.*cannot be opened"):
        _mixture(sources, spec=[a, str(tmp_path / "missing")])
    with pytest.raises(MixtureError, match="unknown key"):
        _mixture(sources, spec=[{"root": a, "wieght": 2}])
    path = tmp_path / "mix.yaml"
    path.write_text(f"sources:\n  - root: {a}\n    weight: 2\n  - root: {small}\n    choose: 3\n"
                    "epoch_size: 30\n")
    mixture = load_mixture(path)
    assert [s.quota.kind for s in mixture.sources] == ["weight", "choose"]
    assert mixture.epoch_size == 30
    path.write_text("sources: [\n")
    with pytest.raises(MixtureError, match=str(path)):
        load_mixture(path)


def test_stratified_batches_hold_each_sources_share_and_resume_exactly(
    sources: dict[str, SyntheticDataset],
) -> None:
    spec = [{"root": str(sources["a"].root), "weight": 3},
            {"root": str(sources["b"].root), "weight": 1}]
    ds = _mixture(sources, spec=spec, epoch_size=96, batching="stratified")
    loader = DataLoader(ds, batch_size=8, num_workers=2, timeout=120)
    batches: list[list[Key]] = []
    for _ in range(2):
        epoch: list[list[Key]] = []
        for batch in ds.track(loader):
            epoch.append(_keys(batch))
        _check_counts([k for b in epoch for k in b], [72, 24],
                      [sources["a"].episode_lengths, sources["b"].episode_lengths])
        batches += epoch
    for batch in batches:
        if len(batch) == 8:  # each worker's share is the mixture's within one episode
            assert abs(sum(1 for k in batch if k[0] == 1) - 2) <= 1, batch
    whole = [k for b in batches[: len(batches) // 2] for k in b]
    first = _mixture(sources, spec=spec, epoch_size=96, batching="stratified")
    consumed = _epoch(first, DataLoader(first, batch_size=8, num_workers=2, timeout=120), 3)
    state = first.state_dict()
    again = _mixture(sources, spec=spec, epoch_size=96, batching="stratified")
    again.load_state_dict(state)
    rest = _epoch(again, DataLoader(again, batch_size=8, num_workers=2, timeout=120))
    assert consumed + rest == whole
    ranks = [_mixture(sources, spec=spec, epoch_size=96, batching="stratified", rank=r,
                      world_size=2) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    other = [k for r in ranks for k in _epoch(r, DataLoader(r, batch_size=4, num_workers=1,
                                                            timeout=120))]
    assert sorted(consumed + other) == sorted(whole)
