"""MinHash signatures for near-duplicate detection: normalisation, shingles, seeded hash family.

Why this shape: any Python work per word costs more than the whole signature (a per-word dict
cache measured 3x slower than the code here), so no Python runs per word or per shingle. A
sub-batch of lower-cased texts is one byte array: word boundaries come from byte range checks,
word hashes from unaligned 8-byte loads at each word's start (work per word, not per byte),
n-grams from shifted slices of the word-hash array, and signatures from one hash per shingle
and one ``minimum.at`` over ``(document, bin)`` cells.

Definitions (these decide which documents count as duplicates; change them and verdicts change):

* **Normalisation**: NFKC (only for non-ASCII text), lower-case, split on Unicode whitespace.
  Punctuation stays attached to its word. The *exact key* of a document is a 128-bit hash of its
  sequence of normalised words (two independent 64-bit polynomial hashes over the 64-bit word
  hashes), so two texts that differ only in case or whitespace are exact duplicates.
* **Word hashes**: a Horner polynomial over the word's UTF-8 bytes read as little-endian 8-byte
  chunks, seeded with the byte length, then the splitmix64 finaliser (see :func:`word_hashes`).
  They are identical in every process and on every machine.
* **Shingles**: every run of ``ngram`` consecutive normalised words (a text shorter than
  ``ngram`` words has one shingle made of all its words; an empty text has none). A shingle's
  hash is ``mix64(sum_k word_hash[i+k] * P_k) >> 32`` with odd seeded multipliers ``P_k`` (order
  matters) and the splitmix64 finaliser, a 32-bit value.
* **Signature** (one-permutation MinHash with optimal densification; Li, Owen and Zhang 2012,
  Shrivastava 2017): one seeded bijection ``h(x) = a * x mod 2**32`` (``a`` odd, from
  ``numpy.random.PCG64(seed)``) and ``num_perm`` bins, bin ``(h * num_perm) >> 32``. Slot ``i``
  is the smallest ``h`` of the document's shingles in bin ``i``; an empty bin takes the slot of
  the first non-empty bin of a probe sequence that depends only on ``i`` and the seed (see
  :meth:`MinHasher._densify`). Two documents agree in a slot with probability equal to their
  Jaccard similarity, as with ``num_perm`` independent permutations, and the slots are
  negatively correlated, so estimates vary a little less. Each shingle is hashed once instead
  of ``num_perm`` times: the signature step costs about a tenth of the ``(num_perm, shingles)``
  product it replaced. A slot is ``EMPTY_SLOT`` only for a document without shingles.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from feedline.dedup.errors import DedupError
from feedline.validate import check_int

DEFAULT_NUM_PERM = 128
DEFAULT_NGRAM = 5  # word 5-grams: the usual choice for web text (datatrove, Dolma, SlimPajama)
DEFAULT_SEED = 1
#: Names the definitions below; recorded in staged work dirs so that arrays written under one
#: definition are never resumed under another.
SIGNATURE_SCHEME = "words-chunk8/oph-densified/1"
EMPTY_SLOT = np.uint32(0xFFFFFFFF)  # signature value of a document without shingles

# Shingles per piece of the signature kernel: its uint32 hashes and uint64 cells stay in L2.
_OPH_PIECE = 1 << 16

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, in place on a uint64 array: spreads every input bit over the output."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def normalize_words(text: str) -> list[str]:
    """The normalised words of ``text`` (see the module docstring)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return text.lower().split()


# Bytes that str.split() treats as whitespace in ASCII text.
_IS_SPACE = np.zeros(256, dtype=bool)
_IS_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


def _space_mask(data: np.ndarray) -> np.ndarray:
    """``_IS_SPACE[data]`` for a uint8 array, by two wrapped range checks (9..13, 28..32): about
    six times faster than the table lookup, which is a gather per byte."""
    shifted = data - np.uint8(9)
    space = shifted <= 4
    shifted -= np.uint8(19)
    space |= shifted <= 4
    return space

# Word hash: the word's UTF-8 bytes as little-endian 8-byte chunks (the last one zero-padded).
_CHUNK_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it is a bijection mod 2**64
_CHUNK_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
_SUB_BATCH_BYTES = 128 * 1024  # text tokenised per numpy pass: its per-word temporaries stay in L2
_MAX_PIECE_CHARS = 1 << 20  # longer texts are tokenised in pieces cut at whitespace
_POW_CACHE = 1 << 20
_WHITESPACE = re.compile(r"\s")  # the characters str.split() splits on


class _Powers:
    """``base**j mod 2**64`` for ``j < n``; tables up to ``_POW_CACHE`` entries are cached (shared
    by every MinHasher), longer ones are built per call, so the cache stays at most 8 MiB."""

    def __init__(self, base: np.uint64) -> None:
        self.base = base
        self.values = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> np.ndarray:
        if n <= _POW_CACHE:
            if len(self.values) < n:
                size = min(max(n, 2 * len(self.values), 4096), _POW_CACHE)
                values = np.full(size, self.base, dtype=np.uint64)
                values[0] = 1
                self.values = np.cumprod(values, dtype=np.uint64)  # wraps modulo 2**64
            return self.values[:n]
        # base**j = base**(j mod C) * (base**C)**(j div C), all modulo 2**64
        low = self.upto(_POW_CACHE)
        step = pow(int(self.base), _POW_CACHE, 2**64)
        high = np.array([pow(step, k, 2**64) for k in range(n // _POW_CACHE + 1)], dtype=np.uint64)
        j = np.arange(n, dtype=np.int64)
        return low[j % _POW_CACHE] * high[j // _POW_CACHE]


def _normalized_text(text: str) -> str:
    if text.isascii():
        return text.lower()
    return " ".join(normalize_words(text))


def _sub_batches(texts: Sequence[str]) -> Iterator[list[str]]:
    """Normalised texts grouped into runs of about ``_SUB_BATCH_BYTES`` characters."""
    i = 0
    while i < len(texts):
        parts: list[str] = []
        size = 0
        while i < len(texts) and (not parts or size < _SUB_BATCH_BYTES):
            parts.append(_normalized_text(texts[i]))
            size += len(parts[-1]) + 1
            i += 1
        yield parts


def word_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of the normalised words of every text, flat, plus the word count per text.

    A word's hash is ``mix64(h)`` where ``h`` is a Horner polynomial over its UTF-8 bytes read
    as little-endian 8-byte chunks ``c_0, c_1, ...`` (the last one zero-padded):
    ``h = c_0 * M + len``, then ``h = h * M + c_k``, all modulo 2**64. Each chunk is one
    unaligned load per word, so no Python code runs per word and no numpy pass per byte.
    """
    pieces = [_word_hashes_of(parts) for parts in _sub_batches(texts)]
    if not pieces:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


_SEQ_BASES = (np.uint64(0xD6E8FEB86659FD93), np.uint64(0xA0761D6478BD642F))
_SEQ_POW = tuple(_Powers(base) for base in _SEQ_BASES)
_SEQ_POW_INV = tuple(_Powers(np.uint64(pow(int(base), -1, 2**64))) for base in _SEQ_BASES)
_SEQ_SALT = (np.uint64(0), np.uint64(0x8EBC6AF09C88C6E3))


def _sequence_keys(words: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``(n, 2)`` uint64 keys of each document's word-hash sequence ``words[bounds[i]:bounds[i+1]]``.

    Key column ``c`` is ``mix64(sum_k (w_k ^ salt_c) * B_c**k + count)`` modulo 2**64; the sums are
    one segmented reduction per column (``reduceat``), not a prefix sum over every word.
    """
    n = len(bounds) - 1
    keys = np.empty((n, 2), dtype=np.uint64)
    lengths = np.diff(bounds)
    nonempty = np.flatnonzero(lengths > 0)
    for col in range(2):
        terms = words ^ _SEQ_SALT[col] if _SEQ_SALT[col] else words.copy()
        terms *= _SEQ_POW[col].upto(len(words))
        raw = np.zeros(n, dtype=np.uint64)
        if len(nonempty):
            raw[nonempty] = np.add.reduceat(terms, bounds[nonempty], dtype=np.uint64)
        raw *= _SEQ_POW_INV[col].upto(len(words) + 1)[bounds[:-1]]
        raw += lengths.astype(np.uint64)
        keys[:, col] = mix64(raw)
    return keys


def _pieces(text: str) -> list[str]:
    """``text`` cut at whitespace into pieces of about ``_MAX_PIECE_CHARS`` (words stay whole)."""
    pieces = []
    start = 0
    while len(text) - start > _MAX_PIECE_CHARS:
        cut = _WHITESPACE.search(text, start + _MAX_PIECE_CHARS)
        if cut is None:
            break
        pieces.append(text[start : cut.start()])
        start = cut.start()
    pieces.append(text[start:])
    return pieces


def _word_hashes_of(parts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Word hashes and per-text word counts; huge texts go piece by piece to bound memory."""
    if max(map(len, parts)) <= _MAX_PIECE_CHARS:
        return _word_hashes_flat(parts)
    hashes: list[np.ndarray] = []
    counts: list[int] = []
    for part in parts:
        results = [_word_hashes_flat([piece]) for piece in _pieces(part)]
        hashes.extend(h for h, _c in results)
        counts.append(sum(int(c[0]) for _h, c in results))
    return np.concatenate(hashes), np.array(counts, dtype=np.int64)


def _word_hashes_flat(parts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    n_docs = len(parts)
    doc_lengths = np.fromiter(
        (len(p) if p.isascii() else len(p.encode("utf-8")) for p in parts), np.int64, n_docs
    )
    # A newline before the first text and after the last one: word and space runs then
    # alternate, so the changes of state read start, end, start, end, ... Eight zero bytes
    # after the end let every word's 8-byte loads stay inside the buffer.
    buf = ("\n" + "\n".join(parts) + "\n\0\0\0\0\0\0\0\0").encode("utf-8")
    n = len(buf) - 8
    space = _space_mask(np.frombuffer(buf, dtype=np.uint8, count=n))
    changes = np.flatnonzero(space[1:] != space[:-1])
    changes += 1
    starts, ends = changes[0::2], changes[1::2]
    lengths = ends - starts
    # An unaligned little-endian uint64 at every byte offset: one gather loads a word's first
    # 8 bytes, so the work is per word, not per byte.
    chunks = np.ndarray((n,), dtype="<u8", buffer=buf, strides=(1,))
    acc = chunks[starts]
    acc &= _CHUNK_MASKS[np.minimum(lengths, 8)]
    acc *= _CHUNK_MULT
    acc += lengths.astype(np.uint64)
    longer = np.flatnonzero(lengths > 8)  # few words: Horner steps over their further chunks
    offset = 8
    while len(longer):
        rest = lengths[longer] - offset
        chunk = chunks[starts[longer] + offset]
        chunk &= _CHUNK_MASKS[np.minimum(rest, 8)]
        step = acc[longer]
        step *= _CHUNK_MULT
        step += chunk
        acc[longer] = step
        longer = longer[rest > 8]
        offset += 8
    doc_starts = np.ones(n_docs, dtype=np.int64)
    np.cumsum(doc_lengths[:-1] + 1, out=doc_starts[1:])
    doc_starts[1:] += 1
    first_word = np.searchsorted(starts, doc_starts)
    counts = np.diff(first_word, append=len(starts)).astype(np.int64)
    return mix64(acc), counts


@dataclass(frozen=True)
class ShingleBatch:
    """Shingle hashes of a batch of documents, flat: doc ``i`` owns ``hashes[offsets[i]:offsets[i+1]]``.

    ``exact_keys[i]`` is the 128-bit key (two uint64) of the normalised text, for exact dedup.
    Shingles of one document may repeat; MinHash ignores repeats and :func:`shingle_set` drops them.
    """

    hashes: np.ndarray  # uint32
    offsets: np.ndarray  # int64, len n + 1
    exact_keys: np.ndarray  # uint64, shape (n, 2)

    def __len__(self) -> int:
        return len(self.exact_keys)

    def shingle_set(self, i: int) -> np.ndarray:
        """Sorted unique shingle hashes of document ``i``."""
        values = np.sort(self.hashes[self.offsets[i] : self.offsets[i + 1]])
        if len(values) > 1:
            values = values[np.concatenate(([True], values[1:] != values[:-1]))]
        return values

    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique hash arrays (0.0 when both are empty)."""
    if len(a) == 0 and len(b) == 0:
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


class MinHasher:
    """A seeded MinHash family: same seed, same parameters -> same signatures, in any process."""

    def __init__(
        self, num_perm: int = DEFAULT_NUM_PERM, ngram: int = DEFAULT_NGRAM, seed: int = DEFAULT_SEED
    ) -> None:
        check_int("num_perm", num_perm, minimum=1, error=DedupError)
        check_int("ngram", ngram, minimum=1, error=DedupError)
        self.num_perm = num_perm
        self.ngram = ngram
        self.seed = seed
        rng = np.random.Generator(np.random.PCG64(seed))
        self._a = np.uint32(rng.integers(0, 2**32, dtype=np.uint64) | np.uint64(1))
        self._probe_salt = np.uint64(rng.integers(0, 2**64, dtype=np.uint64))
        self._ngram_mult = rng.integers(0, 2**64, ngram, dtype=np.uint64) | np.uint64(1)

    # -- shingles --------------------------------------------------------------------------
    def shingle_batch(self, texts: Sequence[str]) -> ShingleBatch:
        """Normalise, hash words once, combine word n-grams with numpy, one sub-batch at a time."""
        hashes: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        exact_keys: list[np.ndarray] = []
        for parts in _sub_batches(texts):
            words, lengths = _word_hashes_of(parts)
            bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=bounds[1:])
            exact_keys.append(_sequence_keys(words, bounds))
            shingles, per_doc = self._combine(words, bounds)
            hashes.append(shingles)
            counts.append(per_doc)
        keys = np.concatenate(exact_keys) if exact_keys else np.empty((0, 2), np.uint64)
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        if counts:
            np.cumsum(np.concatenate(counts), out=offsets[1:])
        flat = np.concatenate(hashes) if hashes else np.empty(0, np.uint32)
        return ShingleBatch(flat, offsets, keys)

    def _combine(self, words: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shingle hashes (uint32, in document order) and the shingle count of every document.

        The n-gram sum is computed at every position of the flat word array with contiguous
        shifted slices (no gathers); positions whose n-gram would cross a document's end (the
        last ``ngram - 1`` of each document) are dropped. The few documents shorter than
        ``ngram`` words get one shingle from their available words.
        """
        n = self.ngram
        mult = self._ngram_mult
        lengths = np.diff(bounds)
        counts = np.where(lengths >= n, lengths - n + 1, np.minimum(lengths, 1))
        total_words = len(words)
        out_bounds = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=out_bounds[1:])
        short_docs = np.flatnonzero((lengths > 0) & (lengths < n))
        long_values = np.empty(0, dtype=np.uint64)
        if total_words >= n:
            span = total_words - n + 1
            acc = words[:span] * mult[0]
            term = np.empty(span, dtype=np.uint64)
            for k in range(1, n):
                np.multiply(words[k : k + span], mult[k], out=term)
                acc += term
            valid = np.ones(span, dtype=bool)
            if n > 1:
                # position p starts a whole n-gram iff p <= end - n for its document
                tails = bounds[1:, None] - np.arange(1, n)[None, :]
                valid[tails[(tails >= bounds[:-1, None]) & (tails < span)]] = False
            long_values = acc[valid]
        if len(short_docs) == 0:
            out = long_values
        else:
            out = np.empty(int(out_bounds[-1]), dtype=np.uint64)
            is_short = np.zeros(len(out), dtype=bool)
            is_short[out_bounds[short_docs]] = True
            out[~is_short] = long_values
            starts = bounds[short_docs]
            acc_short = words[starts] * mult[0]
            for k in range(1, n):
                idx = starts + k
                term_short = words[np.minimum(idx, total_words - 1)] * mult[k]
                term_short[idx >= bounds[short_docs + 1]] = 0
                acc_short += term_short
            out[out_bounds[short_docs]] = acc_short
        return (mix64(out) >> np.uint64(32)).astype(np.uint32), counts

    # -- signatures ------------------------------------------------------------------------
    def signatures_from_shingles(self, batch: ShingleBatch) -> np.ndarray:
        """``(n, num_perm)`` uint32 slots; a document without shingles gets all ``EMPTY_SLOT``.

        One permutation, ``num_perm`` bins (see the module docstring): each shingle is hashed
        once, and a bin's slot is the smallest hash that falls in it, found with one
        ``minimum.at`` over ``(document, bin)`` cells in cache-sized pieces. Bins no shingle
        fell in are then filled by :meth:`_densify`.
        """
        offsets = batch.offsets
        n = len(offsets) - 1
        k = self.num_perm
        out = np.full((n, k), EMPTY_SLOT, dtype=np.uint32)
        flat = out.reshape(-1)
        hashes = batch.hashes
        total = len(hashes)
        if total == 0:
            return out
        filled = np.zeros(n * k, dtype=bool)  # not the slot value: a minimum may be 0xFFFFFFFF
        for start in range(0, total, _OPH_PIECE):
            stop = min(start + _OPH_PIECE, total)
            h = hashes[start:stop] * self._a
            cell = h.astype(np.uint64)
            cell *= np.uint64(k)
            cell >>= np.uint64(32)  # the bin: multiply-shift keeps h's order, bins are ranges
            first = int(np.searchsorted(offsets, start, side="right")) - 1
            last = int(np.searchsorted(offsets, stop, side="left"))
            owner = np.repeat(
                np.arange(first, last, dtype=np.uint64),
                np.minimum(offsets[first + 1 : last + 1], stop) - np.maximum(offsets[first:last], start),
            )
            owner *= np.uint64(k)
            cell += owner
            cells = cell.view(np.int64)
            np.minimum.at(flat, cells, h)
            filled[cells] = True
        self._densify(out, filled.reshape(n, k), np.diff(offsets) > 0)
        return out

    def _densify(self, out: np.ndarray, filled: np.ndarray, has_shingles: np.ndarray) -> None:
        """Optimal densification (Shrivastava, ICML 2017): an empty bin ``i`` takes the slot of
        the first non-empty bin of the probe sequence ``probe(i, 0), probe(i, 1), ...``, which is
        the same for every document. Two documents then agree in a slot with probability equal
        to their Jaccard similarity, as in MinHash."""
        k = self.num_perm
        docs, bins = np.nonzero(~filled & has_shingles[:, None])
        if len(docs) == 0:
            return
        fill = np.empty(len(docs), dtype=np.uint32)
        pending = np.arange(len(docs))
        attempt = 0
        while len(pending):
            z = bins[pending].astype(np.uint64) << np.uint64(32)
            z += np.uint64(attempt)
            z ^= self._probe_salt
            mix64(z)
            z >>= np.uint64(32)
            z *= np.uint64(k)
            z >>= np.uint64(32)
            rows, probes = docs[pending], z.view(np.int64)
            found = filled[rows, probes]
            fill[pending[found]] = out[rows[found], probes[found]]
            pending = pending[~found]
            attempt += 1
        out[docs, bins] = fill

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """Batch API: ``(len(texts), num_perm)`` uint32 MinHash signatures."""
        return self.signatures_from_shingles(self.shingle_batch(texts))


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Fraction of equal signature slots, row-wise (works for 1-D pairs or 2-D stacks)."""
    return np.count_nonzero(sig_a == sig_b, axis=-1) / sig_a.shape[-1]
