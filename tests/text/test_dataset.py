"""TokenDataset on the streaming floor: datatrove's windows, exact coverage, mixtures, budget (resume: test_resume.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.streaming.errors import PlanError, ResumeMismatchError, UnitTooLargeError
from feedline.text import TextError, TokenDataset, TokenSource
from feedline.text.windows import positions

SEQ = 31  # windows of 32 tokens


def _files(root: Path) -> list[np.ndarray]:
    return [np.memmap(p, dtype="<u2", mode="r") for p in sorted(root.glob("*.ds"))]


def _windows(root: Path) -> list[np.ndarray]:
    """Every window DatatroveFolderDataset cuts, in its numbering (files in order)."""
    out = []
    for tokens in _files(root):
        n = tokens.size // (SEQ + 1)
        out.extend(tokens[i * (SEQ + 1) : (i + 1) * (SEQ + 1)] for i in range(n))
    return out


def _epoch(ds: TokenDataset, batch_size: int = 8, num_workers: int = 2, **kw) -> list[dict]:
    loader = DataLoader(ds, batch_size=batch_size, num_workers=num_workers, **kw)
    return list(ds.track(loader))


def _ids(batches: list[dict]) -> list[int]:
    return [int(i) for b in batches for i in b["window_index"]]


def test_items_are_the_windows_of_the_files_with_datatroves_positions(tokens_root):
    ds = TokenDataset(tokens_root, SEQ, return_positions=True, return_index=True, chunk_windows=16)
    windows = _windows(tokens_root)
    items = list(ds)
    assert len(items) == len(ds) == len(windows) == ds.windows
    assert sorted(int(i["window_index"]) for i in items) == list(range(len(windows)))
    ends = [np.fromfile(str(p) + ".index", "<u8").astype(np.int64) for p in sorted(tokens_root.glob("*.ds"))]
    per_file = [t.size // (SEQ + 1) for t in _files(tokens_root)]
    first = np.concatenate(([0], np.cumsum(per_file)))
    for item in items[:300]:
        w = int(item["window_index"])
        assert item["input_ids"].dtype == torch.int64 and item["input_ids"].shape == (SEQ + 1,)
        assert item["input_ids"].tolist() == windows[w].tolist()
        f = int(np.searchsorted(first, w, side="right")) - 1
        assert item["positions"].tolist() == positions(ends[f], (w - first[f]) * (SEQ + 1), SEQ + 1).tolist()
    order = [int(i["window_index"]) for i in items]
    assert order != sorted(order)  # a shuffled order, mixing chunks from across the corpus
    assert len({int(i) // 16 for i in order[:64]}) > 8


def test_labels_are_input_ids_shifted_by_one(tokens_root):
    ds = TokenDataset(tokens_root, SEQ, labels=True, return_positions=True, return_index=True)
    windows = _windows(tokens_root)
    for item in list(ds)[:50]:
        full = windows[int(item["window_index"])]
        assert item["input_ids"].tolist() == full[:-1].tolist() and item["labels"].tolist() == full[1:].tolist()
        assert item["positions"].shape == (SEQ,)


@pytest.mark.parametrize("even", ["none", "pad", "drop"])
def test_exact_coverage_over_2_ranks_x_2_workers_and_two_epochs(tokens_root, even):
    n = TokenDataset(tokens_root, SEQ).windows
    readers = [TokenDataset(tokens_root, SEQ, rank=r, world_size=2, chunk_windows=8, return_index=True,
                            even_batches=even) for r in range(2)]
    orders = []
    for _epoch_number in range(2):
        seen, per_rank = [], []
        evened = [ds.evened_anchors(2) for ds in readers]
        for ds in readers:
            mine = _ids(_epoch(ds, batch_size=8, num_workers=2))
            per_rank.append(len(mine))
            seen.extend(mine)
        if even == "none":
            assert sorted(seen) == list(range(n))  # every window once, over ranks and workers
        elif even == "pad":  # every window, a few twice, as counted; the same count per rank
            assert set(seen) == set(range(n)) and len(set(per_rank)) == 1
            assert len(seen) - n == sum(e["repeated"] for e in evened)
        else:  # every window at most once, the dropped counted
            assert len(set(seen)) == len(seen) and len(set(per_rank)) == 1
            assert n - len(seen) == sum(e["dropped"] for e in evened)
        orders.append(seen)
    assert orders[0] != orders[1]  # each epoch its own order
    assert all(ds.epoch == 2 for ds in readers)


def test_mixture_counts_are_exact_per_epoch(tokens_root, second_root):
    a = TokenDataset(tokens_root, SEQ).windows
    b = TokenDataset(second_root, SEQ).windows
    ds = TokenDataset([TokenSource(str(tokens_root), repeat=2), TokenSource(str(second_root), choose=b // 3)],
                      SEQ, chunk_windows=8, return_index=True)
    assert ds.windows == 2 * a + b // 3
    seen_b: list[int] = []
    for _ in range(3):
        items = [(int(s), int(w)) for batch in _epoch(ds, batch_size=16, num_workers=2)
                 for s, w in zip(batch["source_index"], batch["window_index"], strict=True)]
        counts = Counter(items)
        assert sum(1 for s, _ in items if s == 0) == 2 * a and sum(1 for s, _ in items if s == 1) == b // 3
        assert all(counts[(0, w)] == 2 for w in range(a))  # two whole passes of the first source
        from_b = [w for s, w in items if s == 1]
        assert len(set(from_b)) == len(from_b)  # a window of the second source's cycle: none twice
        seen_b.extend(from_b)
    assert len(set(seen_b)) == len(seen_b) == 3 * (b // 3)  # the windows walk on across epochs


def test_weights_share_the_epoch_size(tokens_root, second_root):
    ds = TokenDataset([{"root": str(tokens_root), "weight": 3}, {"root": str(second_root), "weight": 1}],
                      SEQ, epoch_size=400, return_index=True)
    items = list(ds)
    assert Counter(int(i["source_index"]) for i in items) == {0: 300, 1: 100}
    assert "weight 3 = 300 windows" in ds.mixture


def test_fetched_bytes_stay_within_the_budget(tokens_root):
    chunk_bytes = 8 * (SEQ + 1) * 2
    ds = TokenDataset(tokens_root, SEQ, chunk_windows=8, pool_size=4, prefetch_chunks=2,
                      byte_budget_gb=6 * chunk_bytes / 2**30, return_index=True)
    items = _epoch(ds, batch_size=8, num_workers=2)
    assert sorted(_ids(items)) == list(range(ds.windows))
    metrics = ds.metrics()
    assert 0 < metrics["peak_reserved_bytes"] <= 3 * chunk_bytes  # each worker holds half of six chunks
    assert metrics["samples"] == ds.windows and metrics["bytes_fetched"] == ds.windows * (SEQ + 1) * 2
    with pytest.raises(UnitTooLargeError, match=r"chunk 0 needs 4\.000 KiB of tokens, more than the rank byte budget byte_budget_gb=.*smaller chunk_windows"):
        TokenDataset(tokens_root, SEQ, chunk_windows=64, byte_budget_gb=4000 / 2**30)
    with pytest.warns(DeprecationWarning, match="byte_budget_mb"):
        tight = TokenDataset(tokens_root, SEQ, chunk_windows=64, byte_budget_mb=5000 / 2**20)
    with pytest.raises(UnitTooLargeError, match=r"one DataLoader worker .*1/2 of the rank budget byte_budget_gb"):
        tight.worker_pipeline(tight._current_position(2, None), 2, 0)


def test_bad_settings_are_one_line_errors(tokens_root, tmp_path):
    with pytest.raises(TextError, match="hold no window of seq_len"):
        TokenDataset(tokens_root, 10**7)
    with pytest.raises(PlanError, match="smaller chunk_windows"):
        TokenDataset(tokens_root, SEQ, world_size=500, rank=0)
    with pytest.raises(TextError, match="no .ds token files"):
        TokenDataset(tmp_path, SEQ)
    with pytest.raises(TextError, match="track"):
        TokenDataset(tokens_root, SEQ).state_dict()


def test_persistent_workers_follow_epochs(tokens_root):
    ds = TokenDataset(tokens_root, SEQ, chunk_windows=8, return_index=True)
    loader = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True)
    first = [int(i) for b in ds.track(loader) for i in b["window_index"]]
    second = [int(i) for b in ds.track(loader) for i in b["window_index"]]
    assert sorted(first) == sorted(second) == list(range(ds.windows)) and first != second


def test_set_epoch_and_rank_from_the_environment(tokens_root, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = TokenDataset(tokens_root, SEQ, chunk_windows=8, return_index=True)
    assert (ds.rank, ds.world_size) == (1, 2)
    tracked = TokenDataset(tokens_root, SEQ, chunk_windows=8, return_index=True)
    _epoch(tracked, num_workers=0)
    second = _ids(_epoch(tracked, num_workers=0))  # the second pass of track() is epoch 1
    ds.set_epoch(1)
    assert [int(i["window_index"]) for i in ds] == second
    assert len(ds) == len(second) == ds.rank_windows(1)
    assert sum(ds.batches_per_rank(8, 0, epoch=1)) >= 2


def test_a_mixture_resumes_sample_exactly_and_refuses_a_changed_weight(tokens_root, second_root):
    def make(choose: int) -> TokenDataset:
        return TokenDataset([TokenSource(str(tokens_root), weight=1), TokenSource(str(second_root), choose=choose)],
                            SEQ, chunk_windows=8, epoch_size=900, return_index=True)

    def pairs(batches: list[dict]) -> list[tuple[int, int]]:
        return [(int(s), int(w)) for b in batches for s, w in zip(b["source_index"], b["window_index"], strict=True)]

    full = pairs(_epoch(make(100), batch_size=8, num_workers=2))
    ds = make(100)
    taken = []
    for k, batch in enumerate(ds.track(DataLoader(ds, batch_size=8, num_workers=2))):
        taken.extend(pairs([batch]))
        if k == 30:
            state = ds.state_dict()
            break
    resumed = make(100)
    resumed.load_state_dict(state)
    assert taken + pairs(_epoch(resumed, batch_size=8, num_workers=2)) == full
    with pytest.raises(ResumeMismatchError, match=r"cannot resume sample-exactly: .*mixture \(checkpoint '0:tokens: weight 1 = 800 windows; 1:tokens: choose 100"):
        make(120).load_state_dict(state)
