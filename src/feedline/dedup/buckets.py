"""Band keys as arrays: which partition a key belongs to, which documents share one, exact
duplicates, and union-find clusters.

Why apart from the stages: these are the pure numpy kernels of the staged dedup (no files, no
plan), each tested against a textbook version, and the stages only compose them. Keeping them
together keeps the partition rule (a key's partition) next to the grouping it must not break.
"""

from __future__ import annotations

import numpy as np


def _key_range(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Which of ``partitions`` equal ranges of the 64-bit key space each key falls in."""
    return ((keys >> np.uint64(32)) * np.uint64(partitions)) >> np.uint64(32)


def band_partition(bands: np.ndarray, keys: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each ``(band, band key)``: the cell (band, key range) rotated by band, so
    every partition gets one key range of every band (even sizes, and no band whole anywhere)."""
    return ((bands.astype(np.uint64) + _key_range(keys, partitions)) % np.uint64(partitions)).astype(
        np.int64
    )


def exact_partition(first_halves: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each 128-bit exact key, from its first 64 bits' range."""
    return _key_range(first_halves, partitions).astype(np.int64)


def order_by(part: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(part, kind="stable")
    offsets = np.searchsorted(part[order], np.arange(partitions + 1)).astype(np.int64)
    return order, offsets


def bucket_groups(bands: np.ndarray, keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Groups of >= 2 documents sharing a ``(band, key)``: ``members`` (each group's documents
    ascending) and ``offsets`` (group ``g`` is ``members[offsets[g]:offsets[g + 1]]``)."""
    if len(docs) == 0:
        return np.empty(0, np.uint64), np.zeros(1, np.int64)
    order = np.lexsort((docs, keys, bands))
    b, k, d = bands[order], keys[order], docs[order]
    new = np.empty(len(d), dtype=bool)
    new[0] = True
    new[1:] = (k[1:] != k[:-1]) | (b[1:] != b[:-1])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(d)))
    multi = sizes >= 2
    keep = np.repeat(multi, sizes)
    members = d[keep].astype(np.uint64)
    offsets = np.zeros(int(multi.sum()) + 1, dtype=np.int64)
    np.cumsum(sizes[multi], out=offsets[1:])
    return members, offsets


def group_pairs(members: np.ndarray, offsets: np.ndarray) -> set[tuple[int, int]]:
    """Every candidate pair ``(earlier, later)`` the groups stand for."""
    pairs: set[tuple[int, int]] = set()
    for g in range(len(offsets) - 1):
        group = members[offsets[g] : offsets[g + 1]].tolist()
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                pairs.add((a, b) if a < b else (b, a))
    return pairs


def exact_duplicates(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(doc, first)`` for every document whose 128-bit key an earlier document has, by doc."""
    if len(docs) == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    order = np.lexsort((docs, keys[:, 1], keys[:, 0]))
    k, d = keys[order], docs[order].astype(np.uint64)
    new = np.empty(len(d), dtype=bool)
    new[0] = True
    new[1:] = (k[1:, 0] != k[:-1, 0]) | (k[1:, 1] != k[:-1, 1])
    first = d[np.flatnonzero(new)][np.cumsum(new) - 1]
    dup = ~new
    dup_doc, dup_of = d[dup], first[dup]
    by_doc = np.argsort(dup_doc, kind="stable")
    return dup_doc[by_doc], dup_of[by_doc]


def connected_labels(u: np.ndarray, v: np.ndarray, nodes: int) -> np.ndarray:
    """Union-find over ``nodes`` with edges ``u[i]-v[i]``, in array form: every root hooks onto
    the smallest root it touches, then paths are compressed fully; repeat until no edge joins two
    roots. Returns each node's root (the smallest node of its cluster)."""
    label = np.arange(nodes, dtype=np.int64)
    if len(u) == 0:
        return label
    while True:
        lu, lv = label[u], label[v]
        if np.array_equal(lu, lv):
            return label
        low = np.minimum(lu, lv)
        np.minimum.at(label, lu, low)
        np.minimum.at(label, lv, low)
        while True:  # pointer jumping: every node points at its root
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped
