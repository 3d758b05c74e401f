"""One integer per episode (its frames, its payload bytes) held as two arrays, read as a mapping.

Why: the readers hand the schedule ``{episode: frames}`` and ``{episode: bytes}``. As Python
dicts they cost ~85 MB each at 1,000,000 episodes, ~1 s to build, and every DataLoader worker
that iterates them touches each boxed int, so the pages it inherited by fork become its own
copy. :class:`EpisodeValues` keeps the same mapping in two int64 arrays (pages stay shared);
the schedule reads them whole through :func:`as_arrays` and :meth:`EpisodeValues.take`, and
anything else still sees a read-only ``Mapping[int, int]``.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from typing import Any

import numpy as np

__all__ = ["EpisodeValues", "as_arrays"]


class EpisodeValues(Mapping[int, int]):
    """``{keys[i]: values[i]}`` over ascending, distinct episode indices.

    Args:
        keys: the episode indices, ascending and distinct.
        values: one integer per key.
    """

    __slots__ = ("keys_array", "values_array", "_base", "_dense")

    def __init__(self, keys: Any, values: Any) -> None:
        keys = np.ascontiguousarray(keys, np.int64).reshape(-1)
        values = np.ascontiguousarray(values, np.int64).reshape(-1)
        if keys.shape != values.shape:
            raise ValueError(f"{len(keys)} episodes but {len(values)} values")
        if len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all()):
            raise ValueError("episode indices must ascend without repeats")
        keys, values = keys.view(), values.view()  # read-only views: the caller's stay as they are
        keys.setflags(write=False)
        values.setflags(write=False)
        self.keys_array, self.values_array = keys, values
        self._base = int(keys[0]) if len(keys) else 0
        self._dense = not len(keys) or int(keys[-1]) - self._base + 1 == len(keys)

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, int]) -> EpisodeValues:
        if isinstance(mapping, EpisodeValues):
            return mapping
        keys = np.fromiter(mapping.keys(), np.int64, len(mapping))
        values = np.fromiter(mapping.values(), np.int64, len(mapping))
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], values[order])

    def _position(self, key: object) -> int:
        try:
            k = int(key)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise KeyError(key) from None
        n = len(self.keys_array)
        if self._dense:
            i = k - self._base
            if 0 <= i < n:
                return i
            raise KeyError(key)
        i = int(np.searchsorted(self.keys_array, k))
        if i < n and int(self.keys_array[i]) == k:
            return i
        raise KeyError(key)

    def __getitem__(self, key: int) -> int:
        return int(self.values_array[self._position(key)])

    def __contains__(self, key: object) -> bool:
        try:
            self._position(key)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_array.tolist())

    def __len__(self) -> int:
        return len(self.keys_array)

    def values(self) -> ValuesView[int]:
        return _Values(self)

    def items(self) -> ItemsView[int, int]:
        return _Items(self)

    def take(self, keys: Any) -> np.ndarray:
        """The values of ``keys`` (an array), in their order; a ``KeyError`` names the first
        key that is not here."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        n = len(self.keys_array)
        if self._dense:
            pos = keys - self._base
            bad = (pos < 0) | (pos >= n)
        else:
            pos = np.searchsorted(self.keys_array, keys)
            bad = pos >= n
            bad[~bad] = self.keys_array[pos[~bad]] != keys[~bad]
        if bad.any():
            raise KeyError(int(keys[int(np.argmax(bad))]))
        return self.values_array[pos]

    def total(self) -> int:
        return int(self.values_array.sum())

    def __reduce__(self) -> tuple[Any, ...]:
        return EpisodeValues, (self.keys_array, self.values_array)

    def __repr__(self) -> str:
        return f"EpisodeValues({len(self)} episodes)"


class _Values(ValuesView[int]):
    _mapping: EpisodeValues

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping.values_array.tolist())


class _Items(ItemsView[int, int]):
    _mapping: EpisodeValues

    def __iter__(self) -> Iterator[tuple[int, int]]:
        m = self._mapping
        return zip(m.keys_array.tolist(), m.values_array.tolist(), strict=True)


def as_arrays(mapping: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(keys ascending, values)`` of any ``{episode: int}`` mapping, without a Python loop
    for :class:`EpisodeValues`."""
    values = EpisodeValues.from_mapping(mapping)
    return values.keys_array, values.values_array
