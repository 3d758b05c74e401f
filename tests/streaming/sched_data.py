"""Random episode selections for the scheduler's property tests (no I/O).

Hypothesis draws a few numbers; numpy turns them into large selections quickly, which keeps
example generation cheap while covering 1-2,000 episodes of 1-5,000 frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st


@dataclass(frozen=True)
class Selection:
    lengths: dict[int, int]  # episode index -> frames, for the selected episodes only
    note: str

    @property
    def total(self) -> int:
        return sum(self.lengths.values())

    @property
    def max_len(self) -> int:
        return max(self.lengths.values())


def make_selection(
    n: int, max_len: int, shape: str, data_seed: int, subset: bool, max_total: int
) -> Selection:
    rng = np.random.default_rng(data_seed)
    if shape == "uniform":
        lengths = rng.integers(1, max_len + 1, n)
    elif shape == "heavy":  # mostly short, a few very long episodes
        lengths = np.minimum(max_len, 1 + rng.pareto(1.2, n) * 20).astype(np.int64)
    else:  # all equal
        lengths = np.full(n, max_len, dtype=np.int64)
    keep = int(np.searchsorted(np.cumsum(lengths), max_total, side="right"))
    lengths = lengths[: max(1, keep)]
    if subset:  # a sparse selection of a larger dataset
        indices = np.sort(rng.choice(4 * lengths.size + 10, lengths.size, replace=False))
    else:
        indices = np.arange(lengths.size)
    return Selection(
        {int(i): int(x) for i, x in zip(indices, lengths, strict=True)},
        f"{lengths.size} eps {shape} max {max_len} subset={subset}",
    )


def selections(max_total: int = 200_000, max_episodes: int = 2000) -> st.SearchStrategy[Selection]:
    return st.builds(
        make_selection,
        n=st.integers(1, max_episodes),
        max_len=st.integers(1, 5000),
        shape=st.sampled_from(["uniform", "heavy", "equal"]),
        data_seed=st.integers(0, 2**32 - 1),
        subset=st.booleans(),
        max_total=st.just(max_total),
    )
