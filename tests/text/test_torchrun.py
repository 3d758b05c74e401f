"""A real DDP job over ``TokenDataset``: ``torchrun`` with 2 and 3 processes (gloo, CPU), two
epochs and a mid-epoch resume; every rank takes the same number of steps and the ranks together
read every window, repeated only as counted."""

from __future__ import annotations

from collections import Counter

import pytest

from feedline.text import TokenDataset
from tests.ddp_loop import torchrun


def _check(records: list[dict], epoch_at: int, windows: int) -> None:
    epochs = [r["epochs"][epoch_at] for r in records]
    assert len({e["steps"] for e in epochs}) == 1, [e["steps"] for e in epochs]
    read = Counter(k for e in epochs for k in e["keys"])
    assert set(read) == set(range(windows))
    assert sum(read.values()) - windows == sum(e["evened"]["repeated"] for e in epochs)


@pytest.mark.parametrize(("nproc", "chunk"), [(2, 6), (3, 11)])
def test_a_ddp_job_over_tokens_finishes_both_epochs(tokens_root, tmp_path, nproc, chunk):
    windows = TokenDataset(tokens_root, 15).windows
    plain = TokenDataset(tokens_root, 15, chunk_windows=chunk, rank=0, world_size=nproc,
                         even_batches="none").batches_per_rank(16, 1)
    assert len(set(plain)) > 1  # without evening out, the ranks would differ (and hang)
    records = torchrun(tmp_path / "run", "--reader", "tokens", "--root", str(tokens_root),
                       "--batch-size", "16", "--chunk-windows", str(chunk), nproc=nproc)
    for epoch_at in range(2):
        _check(records, epoch_at, windows)


def test_a_token_job_resumes_mid_epoch(tokens_root, tmp_path):
    windows = TokenDataset(tokens_root, 15).windows
    first = torchrun(tmp_path / "first", "--reader", "tokens", "--root", str(tokens_root),
                     "--batch-size", "16", "--stop-after", "7", nproc=2)
    rest = torchrun(tmp_path / "rest", "--reader", "tokens", "--root", str(tokens_root),
                    "--resume", str(tmp_path / "first" / "state.json"), "--epochs", "1",
                    "--batch-size", "16", nproc=2)
    steps = {a["epochs"][0]["steps"] + b["epochs"][0]["steps"] for a, b in zip(first, rest, strict=True)}
    assert len(steps) == 1
    read = Counter(k for run in (first, rest) for r in run for k in r["epochs"][0]["keys"])
    assert set(read) == set(range(windows))
    assert sum(read.values()) - windows == sum(r["epochs"][0]["evened"]["repeated"] for r in first)
