"""Exact then near-duplicate detection over a stream of documents; first occurrence wins.

For every document, in order:

1. **exact**: its 128-bit normalised-text key (see :mod:`feedline.dedup.minhash`) is looked up
   among all earlier documents that were not exact duplicates themselves; a match gives
   ``exact_dup_of:<first id>`` (even when that first document was a near duplicate).
2. **near**: its MinHash signature's band keys are looked up in the LSH index, which holds only
   *kept* documents. Each candidate is confirmed by ``verify``:

   * ``"exact"`` (default): exact Jaccard of the two shingle-hash sets >= threshold. Precision is
     1.0 by construction (up to 32-bit shingle-hash collisions), and recall is the S-curve's
     collision probability. Shingle sets of kept documents are spilled to an anonymous temporary
     file (about 4 bytes per shingle on disk, 12 bytes per document in RAM).
   * ``"estimate"``: the fraction of equal MinHash slots >= threshold, from 16-bit slices of the
     stored signatures (b-bit MinHash; 256 bytes per kept document in RAM, no disk).

   The earliest confirmed kept document wins: ``near_dup_of:<id>``. Otherwise ``kept``.

The batch form :meth:`Deduplicator.add_batch` vectorises shingling, signatures, lookups and
checks over a chunk, then resolves the chunk in order; it returns exactly what calling
:meth:`Deduplicator.add` once per document would, so results do not depend on batch size.
Same configuration (including ``seed``) -> same verdicts, in any process.

RAM per indexed document: LSH ``12 * bands`` bytes (192 B at 16 bands), exact index 20 B, shingle
spill offsets 12 B (``exact``) or signatures 256 B (``estimate``), plus the caller's id string.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from feedline.dedup.errors import DedupError
from feedline.validate import check_int

from .lsh import LSHIndex, SortedKeyIndex, optimal_bands_rows
from .minhash import DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_SEED, MinHasher, ShingleBatch

DEFAULT_THRESHOLD = 0.8
DEFAULT_CHUNK = 4096  # documents per vectorised step of add_batch
_MAX_PAIRS_PER_STEP = 1 << 21  # in-chunk candidate pairs before a chunk is split in halves
_BBIT_MASK = np.uint32(0xFFFF)

VerifyMode = Literal["exact", "estimate"]
T = TypeVar("T")


#: How ``feedline dedup`` and ``feedline download --dedup`` spell each setting.
FLAGS = {"threshold": "--threshold", "num_perm": "--num-perm", "ngram": "--ngram", "bands": "--bands",
         "rows": "--rows", "seed": "--seed", "verify": "--verify"}


def check_settings(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Refuse bad dedup settings, naming each as the caller spelled it: the keyword by default,
    the flag when ``names`` maps keywords to flags."""

    def name(key: str) -> str:
        return names.get(key, key) if names else key

    threshold = values["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 < threshold < 1.0:
        raise DedupError(f"{name('threshold')} must be in (0, 1), got {threshold!r}")
    num_perm = check_int(name("num_perm"), values["num_perm"], minimum=1, error=DedupError)
    check_int(name("ngram"), values["ngram"], minimum=1, error=DedupError)
    check_int(name("seed"), values["seed"], error=DedupError)
    bands, rows = values["bands"], values["rows"]
    if (bands is None) != (rows is None):
        raise DedupError(f"{name('bands')} and {name('rows')} go together: give both or neither")
    if bands is not None:
        check_int(name("bands"), bands, minimum=1, error=DedupError)
        check_int(name("rows"), rows, minimum=1, error=DedupError)
        if bands * rows > num_perm:
            raise DedupError(
                f"{name('bands')} {bands} x {name('rows')} {rows} must use at most "
                f"{name('num_perm')} {num_perm} signature slots"
            )
    if values["verify"] not in ("exact", "estimate"):
        raise DedupError(f"{name('verify')} must be 'exact' or 'estimate', got {values['verify']!r}")


@dataclass(frozen=True)
class DedupConfig:
    """Everything that decides the verdicts; recorded in manifests so a run can be repeated.

    Args:
        threshold: Jaccard similarity (0, 1) from which two documents are near duplicates (0.8).
        num_perm: MinHash signature slots (128): bins of the one permutation.
        ngram: words per shingle (5).
        bands: LSH bands; ``None`` chooses ``bands x rows`` from ``threshold`` (the S-curve whose
            false positive + false negative area is smallest). Give both or neither.
        rows: signature rows per band, with ``bands``.
        seed: seed of the hash family: the same seed gives the same verdicts in any process (1).
        verify: how candidates are confirmed: ``"exact"`` shingle Jaccard or the MinHash
            ``"estimate"`` (see the module docstring).
    """

    threshold: float = DEFAULT_THRESHOLD
    num_perm: int = DEFAULT_NUM_PERM
    ngram: int = DEFAULT_NGRAM
    bands: int | None = None  # None: chosen from threshold (optimal_bands_rows)
    rows: int | None = None
    seed: int = DEFAULT_SEED
    verify: VerifyMode = "exact"

    def __post_init__(self) -> None:
        check_settings(asdict(self))

    @classmethod
    def from_flags(cls, **values: Any) -> DedupConfig:
        """The config from command-line values; errors name the flags (``--num-perm``)."""
        check_settings({**asdict(cls()), **values}, FLAGS)
        return cls(**values)

    def banding(self) -> tuple[int, int]:
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return optimal_bands_rows(self.threshold, self.num_perm)

    def to_dict(self) -> dict[str, object]:
        bands, rows = self.banding()
        return {**asdict(self), "bands": bands, "rows": rows}


@dataclass(frozen=True)
class Verdict:
    """``kind`` is ``kept``, ``exact_dup`` or ``near_dup``; ``of`` the earlier document's id;
    ``similarity`` the confirmed Jaccard (exact or estimated) of a near duplicate."""

    kind: Literal["kept", "exact_dup", "near_dup"]
    of: str | None = None
    similarity: float | None = None

    def __str__(self) -> str:
        return "kept" if self.kind == "kept" else f"{self.kind}_of:{self.of}"

    @property
    def kept(self) -> bool:
        return self.kind == "kept"


KEPT = Verdict("kept")


class _ShingleSpill:
    """Append-only store of kept documents' shingle hashes in an anonymous temp file."""

    def __init__(self, directory: str | None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - lives with the index
        self._fd = self._file.fileno()
        self._size = 0
        self.offsets = np.empty(0, dtype=np.int64)  # by internal index; -1 = not stored
        self.lengths = np.empty(0, dtype=np.uint32)

    def put(self, internal: np.ndarray, batch: ShingleBatch, rows: np.ndarray) -> None:
        """Store the shingle sets of batch rows ``rows`` under internal indexes ``internal``."""
        needed = int(internal.max()) + 1 if len(internal) else 0
        if needed > len(self.offsets):
            grow = max(needed, 2 * len(self.offsets), 1024)
            self.offsets = np.concatenate([self.offsets, np.full(grow - len(self.offsets), -1)])
            self.lengths = np.concatenate(
                [self.lengths, np.zeros(grow - len(self.lengths), np.uint32)]
            )
        # Raw shingle hashes (repeats included); sorting waits until a candidate needs them.
        lengths = batch.offsets[rows + 1] - batch.offsets[rows]
        take = np.repeat(
            batch.offsets[rows] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths
        )
        take += np.arange(len(take))
        starts = self._size + 4 * np.concatenate(([0], np.cumsum(lengths)[:-1]))
        blob = batch.hashes[take].tobytes()
        os.pwrite(self._fd, blob, self._size)
        self._size += len(blob)
        self.offsets[internal] = starts
        self.lengths[internal] = lengths

    def get(self, internal: int) -> np.ndarray:
        """Sorted distinct shingle hashes of a stored document."""
        n = int(self.lengths[internal])
        data = os.pread(self._fd, 4 * n, int(self.offsets[internal]))
        return _sorted_unique(np.frombuffer(data, dtype=np.uint32).copy())

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.lengths.nbytes

    def close(self) -> None:
        self._file.close()


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (in place sort; numpy's hash-based ``unique`` is slower here)."""
    values.sort()
    if len(values) == 0:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _jaccard_sorted(a: np.ndarray, b: np.ndarray) -> float:
    inter = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - inter
    return inter / union if union else 0.0


class Deduplicator:
    """Streaming exact + MinHash/LSH deduplicator. Use as a context manager (or call close())."""

    def __init__(self, config: DedupConfig | None = None, *, spill_dir: str | None = None) -> None:
        self.config = config or DedupConfig()
        self.bands, self.rows = self.config.banding()
        self.hasher = MinHasher(self.config.num_perm, self.config.ngram, self.config.seed)
        self.lsh = LSHIndex(self.bands, self.rows, self.config.seed)
        self._exact = SortedKeyIndex(1)
        self._exact_second = np.empty(1024, dtype=np.uint64)  # 2nd key half, by internal index
        self._ids: list[str] = []  # internal index -> id, for every non-exact-duplicate
        self._spill = _ShingleSpill(spill_dir) if self.config.verify == "exact" else None
        self._bbit = (
            np.empty((1024, self.config.num_perm), np.uint16) if self._spill is None else None
        )
        self.counts = {"kept": 0, "exact_dup": 0, "near_dup": 0}

    # -- public API ------------------------------------------------------------------------
    def add(self, doc_id: str, text: str) -> Verdict:
        """Verdict for the next document of the stream."""
        return self.add_batch([doc_id], [text])[0]

    def add_batch(
        self, ids: Sequence[str], texts: Sequence[str], *, chunk_size: int = DEFAULT_CHUNK
    ) -> list[Verdict]:
        """Verdicts for the next documents, identical to calling :meth:`add` on each in order."""
        if len(ids) != len(texts):
            raise DedupError(f"{len(ids)} ids but {len(texts)} texts")
        verdicts: list[Verdict] = []
        for start in range(0, len(ids), chunk_size):
            chunk_ids = list(ids[start : start + chunk_size])
            batch = self.hasher.shingle_batch(texts[start : start + chunk_size])
            signatures = self.hasher.signatures_from_shingles(batch)
            verdicts.extend(self._process(chunk_ids, batch, signatures, 0, len(chunk_ids)))
        for v in verdicts:
            self.counts[v.kind] += 1
        return verdicts

    def stream(
        self,
        items: Iterable[T],
        id_of: Callable[[T], str],
        text_of: Callable[[T], str],
        *,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> Iterator[tuple[T, Verdict]]:
        """``(item, verdict)`` for every item of an iterable, in order, deduplicated in chunks.

        The way to feed a document stream (e.g. ``stream_jsonl``): same verdicts as :meth:`add`
        per item, at batch speed (``add`` alone costs ~1 ms of numpy call overhead per document).
        """
        pending: list[T] = []
        for item in items:
            pending.append(item)
            if len(pending) >= chunk_size:
                yield from self._verdicts_for(pending, id_of, text_of)
                pending = []
        if pending:
            yield from self._verdicts_for(pending, id_of, text_of)

    def _verdicts_for(
        self, items: list[T], id_of: Callable[[T], str], text_of: Callable[[T], str]
    ) -> Iterator[tuple[T, Verdict]]:
        verdicts = self.add_batch([id_of(x) for x in items], [text_of(x) for x in items])
        yield from zip(items, verdicts, strict=True)

    @property
    def index_nbytes(self) -> int:
        """RAM held by the indexes (LSH, exact keys, spill offsets or b-bit signatures)."""
        held = self.lsh.nbytes + self._exact.nbytes + self._exact_second.nbytes
        held += self._spill.nbytes if self._spill is not None else 0
        held += self._bbit.nbytes if self._bbit is not None else 0
        return held

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()

    def __enter__(self) -> Deduplicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one vectorised step over rows [lo, hi) of a chunk ---------------------------------------
    def _process(
        self, ids: list[str], batch: ShingleBatch, signatures: np.ndarray, lo: int, hi: int
    ) -> list[Verdict]:
        n = hi - lo
        verdicts: list[Verdict | None] = [None] * n
        exact_of, first_in_step = self._exact_matches(batch.exact_keys[lo:hi])
        # Rows that are not exact duplicates get an internal index (in order) and enter the exact
        # index; of those, rows with at least one shingle go through the near-duplicate stage.
        fresh = np.flatnonzero(exact_of < -1)  # -2 marks "no exact match"
        base = len(self._ids)
        internal = np.full(n, -1, dtype=np.int64)
        internal[fresh] = base + np.arange(len(fresh))
        for r in np.flatnonzero(exact_of >= 0).tolist():
            verdicts[r] = Verdict("exact_dup", self._ids[exact_of[r]])
        in_chunk = np.flatnonzero((exact_of < 0) & (exact_of > -2))
        counts = batch.counts()[lo:hi]
        near_rows = fresh[counts[fresh] > 0]
        keys = self.lsh.band_keys(signatures[lo + near_rows])
        pairs_within = self._pairs_within(keys)
        if pairs_within is None:  # too many in-chunk candidate pairs: halve the step
            mid = lo + n // 2
            return self._process(ids, batch, signatures, lo, mid) + self._process(
                ids, batch, signatures, mid, hi
            )
        self._ids.extend(ids[lo + r] for r in fresh.tolist())
        self._add_exact(batch.exact_keys[lo + fresh], internal[fresh])
        # exact duplicates of earlier rows of this same step
        for r in in_chunk.tolist():
            verdicts[r] = Verdict("exact_dup", ids[lo + first_in_step[r]])
        sets_cache: dict[int, np.ndarray] = {}

        def row_set(row: int) -> np.ndarray:
            if row not in sets_cache:
                sets_cache[row] = batch.shingle_set(lo + row)
            return sets_cache[row]

        # candidates among kept documents of earlier steps
        q_rows, q_docs = self.lsh.query(keys)
        best_prev: dict[int, tuple[int, float]] = {}
        for qr, doc in zip(q_rows.tolist(), q_docs.tolist(), strict=True):
            row = int(near_rows[qr])
            if row in best_prev and best_prev[row][0] < doc:
                continue
            sim = self._similarity_prev(row_set(row), signatures[lo + row], doc)
            if sim >= self.config.threshold:
                best_prev[row] = (doc, sim)
        # candidates within this step, resolved in order (kept status depends on earlier rows)
        kept = np.zeros(n, dtype=bool)
        within: dict[int, list[int]] = {}
        for a, b in pairs_within:
            within.setdefault(int(near_rows[b]), []).append(int(near_rows[a]))
        for row in near_rows.tolist():
            if row in best_prev:
                doc, sim = best_prev[row]
                verdicts[row] = Verdict("near_dup", self._ids[doc], round(sim, 5))
                continue
            for earlier in sorted(within.get(row, ())):
                if not kept[earlier]:
                    continue
                sim = self._similarity_rows(
                    row_set(row), row_set(earlier), signatures, lo, row, earlier
                )
                if sim >= self.config.threshold:
                    verdicts[row] = Verdict("near_dup", ids[lo + earlier], round(sim, 5))
                    break
            else:
                kept[row] = True
        kept_near = np.flatnonzero(kept[near_rows])
        if len(kept_near):
            kept_rows = near_rows[kept_near]
            self.lsh.insert(keys[kept_near], internal[kept_rows])
            self._store(kept_rows, internal[kept_rows], batch, signatures, lo)
        out: list[Verdict] = []
        for r in range(n):
            out.append(verdicts[r] or KEPT)  # empty texts that are not exact duplicates: kept
        return out

    # -- helpers ---------------------------------------------------------------------------
    def _exact_matches(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: internal index of an earlier equal document (>= 0), -1 when the first equal
        document is an earlier row of this step, -2 when new; and per row the first row of the
        step with the same key."""
        n = len(keys)
        result = np.full(n, -2, dtype=np.int64)
        q_rows, q_docs = self._exact.query(keys[:, :1])
        for qr, doc in zip(q_rows.tolist(), q_docs.tolist(), strict=True):
            if self._exact_second[doc] == keys[qr, 1] and (result[qr] < 0 or doc < result[qr]):
                result[qr] = doc
        _, first, inverse = np.unique(
            keys.view(np.dtype((np.void, 16))).ravel(), return_index=True, return_inverse=True
        )
        first_rows = first[inverse.ravel()]
        repeat = (first_rows != np.arange(n)) & (result == -2)
        result[repeat] = -1
        # A row whose first in-step equal is itself an earlier exact duplicate of an older
        # document points at that older document too.
        for r in np.flatnonzero(repeat).tolist():
            first_row = int(first_rows[r])
            if result[first_row] >= 0:
                result[r] = result[first_row]
        return result, first_rows

    def _add_exact(self, keys: np.ndarray, internal: np.ndarray) -> None:
        if len(internal) == 0:
            return
        needed = int(internal.max()) + 1
        if needed > len(self._exact_second):
            grown = np.empty(max(needed, 2 * len(self._exact_second)), np.uint64)
            grown[: len(self._exact_second)] = self._exact_second
            self._exact_second = grown
        self._exact_second[internal] = keys[:, 1]
        self._exact.insert(keys[:, :1].copy(), internal.astype(np.uint32))

    def _pairs_within(self, keys: np.ndarray) -> list[tuple[int, int]] | None:
        """``(a, b)`` positions with ``a < b`` sharing a band key, or None if over budget."""
        if len(keys) < 2:
            return []
        pairs: set[tuple[int, int]] = set()
        total = 0
        for band in range(keys.shape[1]):
            column = keys[:, band]
            order = np.argsort(column, kind="stable")
            ordered = column[order]
            same = np.flatnonzero(ordered[1:] == ordered[:-1])
            if len(same) == 0:
                continue
            # runs of equal keys: boundaries where a new run starts
            run_start = np.flatnonzero(np.diff(np.concatenate(([-2], same))) != 1)
            run_lo = same[run_start]
            run_hi = np.concatenate((same[run_start[1:] - 1], same[-1:])) + 2
            sizes = run_hi - run_lo
            total += int((sizes * (sizes - 1) // 2).sum())
            if total > _MAX_PAIRS_PER_STEP and len(keys) > 1:
                return None
            for a_lo, a_hi in zip(run_lo.tolist(), run_hi.tolist(), strict=True):
                members = sorted(order[a_lo:a_hi].tolist())
                for i, a in enumerate(members):
                    for b in members[i + 1 :]:
                        pairs.add((a, b))
        return sorted(pairs)

    def _similarity_prev(self, row_set: np.ndarray, signature: np.ndarray, doc: int) -> float:
        if self._spill is not None:
            return _jaccard_sorted(row_set, self._spill.get(doc))
        assert self._bbit is not None
        return _bbit_similarity(signature.astype(np.uint32) & _BBIT_MASK, self._bbit[doc])

    def _similarity_rows(
        self, set_a: np.ndarray, set_b: np.ndarray, signatures: np.ndarray, lo: int, a: int, b: int
    ) -> float:
        if self._spill is not None:
            return _jaccard_sorted(set_a, set_b)
        # b-bit estimate also within a step, so results match one-at-a-time processing
        return _bbit_similarity(signatures[lo + a] & _BBIT_MASK, signatures[lo + b] & _BBIT_MASK)

    def _store(
        self,
        rows: np.ndarray,
        internal: np.ndarray,
        batch: ShingleBatch,
        signatures: np.ndarray,
        lo: int,
    ) -> None:
        if self._spill is not None:
            self._spill.put(internal, batch, lo + rows)
            return
        assert self._bbit is not None
        needed = int(internal.max()) + 1
        if needed > len(self._bbit):
            grown = np.empty((max(needed, 2 * len(self._bbit)), self._bbit.shape[1]), np.uint16)
            grown[: len(self._bbit)] = self._bbit
            self._bbit = grown
        self._bbit[internal] = (signatures[lo + rows] & _BBIT_MASK).astype(np.uint16)


def _bbit_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard estimate from 16-bit MinHash slices, corrected for chance collisions."""
    equal = float(np.count_nonzero(a.astype(np.uint16) == b.astype(np.uint16))) / len(a)
    chance = 1.0 / 65536
    return max(0.0, (equal - chance) / (1.0 - chance))


def dedup_texts(
    ids: Sequence[str], texts: Sequence[str], config: DedupConfig | None = None
) -> list[Verdict]:
    """One-shot in-memory form: verdicts for ``texts`` in order (first occurrence wins)."""
    with Deduplicator(config) as dedup:
        return dedup.add_batch(ids, texts)
