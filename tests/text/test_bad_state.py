"""Mistyped checkpoints are one line (they were ``AttributeError``/``ValueError`` tracebacks or
plans for a billion workers): checked on a real TokenDataset and DataLoader."""

from __future__ import annotations

import copy

import pytest
from torch.utils.data import DataLoader

from feedline.errors import FeedlineError
from feedline.text import TokenDataset

SEQ = 31


@pytest.fixture(scope="module")
def good(tokens_root):
    ds = TokenDataset(tokens_root, SEQ, chunk_windows=4)
    batches = ds.track(DataLoader(ds, batch_size=4))
    next(batches)
    return ds.state_dict()


def _cases(good):
    def mut(key, value):
        state = copy.deepcopy(good)
        state[key] = value
        return state

    yield "None", None
    yield "a list", [1]
    yield "a string", "abc"
    yield "drop_last: 'yes'", mut("drop_last", "yes")
    yield "num_workers 10**9", mut("num_workers", 10**9)
    yield "17 history stages", mut("history", [[1, 0, 2]] * 17)
    yield "history a string", mut("history", "x")
    for key in ("world_size", "batch_size", "num_workers", "epoch", "rank", "batches_consumed_on_rank",
                "samples_consumed_on_rank"):
        yield f"{key} 'x'", mut(key, "x")
        yield f"{key} 1.5", mut(key, 1.5)
        yield f"{key} -3", mut(key, -3)
    yield "pool_settings a list", mut("pool_settings", [1])


def test_every_mistyped_state_is_one_line(tokens_root, good):
    for name, state in _cases(good):
        ds = TokenDataset(tokens_root, SEQ, chunk_windows=4)
        with pytest.raises(FeedlineError) as err:  # noqa: PT012 (the refusal may come at load or at start)
            ds.load_state_dict(state)
            next(iter(ds.track(DataLoader(ds, batch_size=4))))
        assert "\n" not in str(err.value), name
