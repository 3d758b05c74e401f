"""The vectorised kernels agree with plain per-document definitions, on any batch shape.

Why: the kernels cut documents out of flat arrays (word boundaries, n-grams crossing document
ends, documents shorter than ``ngram``, product blocks spanning documents). A slip at a boundary
changes only the documents next to it, so these oracles are computed one document at a time
with Python integers and compared on random batches.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline.dedup.minhash as minhash
from feedline.dedup.minhash import EMPTY_SLOT, MinHasher, normalize_words, word_hashes

M64 = 2**64
WORDS = st.sampled_from(["a", "bb", "Ccc", "dd", "e\x1ff", "ünï", "x", "yy", "zzz"])
DOCS = st.lists(st.lists(WORDS, max_size=12).map(" ".join), min_size=1, max_size=10)


def _mix64(z: int) -> int:
    z ^= z >> 30
    z = z * 0xBF58476D1CE4E5B9 % M64
    z ^= z >> 27
    z = z * 0x94D049BB133111EB % M64
    return z ^ (z >> 31)


def _word_hash(word: str) -> int:
    """The documented word hash: mix64(sum_j (byte_j + 1) * B**j + len) modulo 2**64."""
    base = int(minhash._WORD_BASE)
    data = word.encode("utf-8")
    total = sum((b + 1) * pow(base, j, M64) for j, b in enumerate(data)) + len(data)
    return _mix64(total % M64)


def _shingles(hasher: MinHasher, text: str) -> list[int]:
    """The documented shingle hashes of one text, one n-gram at a time."""
    hashes = [_word_hash(w) for w in normalize_words(text)]
    mult = [int(m) for m in hasher._ngram_mult]
    n = hasher.ngram
    grams = [hashes[i : i + n] for i in range(len(hashes) - n + 1)] or ([hashes] if hashes else [])
    return [_mix64(sum(h * m for h, m in zip(g, mult, strict=False)) % M64) >> 32 for g in grams]


def test_space_mask_equals_the_whitespace_table() -> None:
    data = np.arange(256, dtype=np.uint8)
    assert np.array_equal(minhash._space_mask(data), minhash._IS_SPACE)
    spaces = [chr(b) for b in range(256) if minhash._IS_SPACE[b]]
    assert "".join(f"a{c}" for c in spaces).split() == ["a"] * len(spaces)


@settings(max_examples=60, deadline=None)
@given(texts=DOCS)
def test_word_hashes_match_the_definition(texts: list[str]) -> None:
    hashes, counts = word_hashes(texts)
    words = [w for t in texts for w in normalize_words(t)]
    assert counts.tolist() == [len(normalize_words(t)) for t in texts]
    assert hashes.tolist() == [_word_hash(w) for w in words]


@settings(max_examples=80, deadline=None)
@given(texts=DOCS, ngram=st.integers(1, 6))
def test_shingles_and_signatures_match_per_document_oracles(texts: list[str], ngram: int) -> None:
    hasher = MinHasher(num_perm=40, ngram=ngram, seed=3)  # 40: not a multiple of the block rows
    batch = hasher.shingle_batch(texts)
    sigs = hasher.signatures_from_shingles(batch)
    a = hasher._a.ravel().astype(object)
    b = hasher._b.ravel().astype(object)
    for i, text in enumerate(texts):
        expected = _shingles(hasher, text)
        got = batch.hashes[batch.offsets[i] : batch.offsets[i + 1]].tolist()
        assert got == expected
        if not expected:
            assert (sigs[i] == EMPTY_SLOT).all()
            continue
        slots = [min((int(ak) * x + int(bk)) % 2**32 for x in expected) for ak, bk in zip(a, b, strict=True)]
        assert sigs[i].tolist() == slots


def test_product_blocks_split_documents_and_permutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny blocks force every path: several documents per block, one document over several
    blocks (running minimum), permutation rows in several slices."""
    rng = np.random.default_rng(4)
    vocab = [f"w{i}" for i in range(50)]
    texts = [" ".join(rng.choice(vocab, int(rng.integers(0, 40))).tolist()) for _ in range(30)]
    hasher = MinHasher(num_perm=37, seed=9)
    reference = hasher.signatures(texts)
    monkeypatch.setattr(minhash, "_KERNEL_COLUMNS", 16)
    monkeypatch.setattr(minhash, "_KERNEL_ROWS", 5)
    assert np.array_equal(hasher.signatures(texts), reference)
    batch = hasher.shingle_batch(texts)
    x = batch.hashes.astype(np.uint64)
    for i in range(len(texts)):
        part = x[batch.offsets[i] : batch.offsets[i + 1]]
        if len(part):
            direct = (hasher._a.astype(np.uint64) * part[None, :] + hasher._b) % 2**32
            assert np.array_equal(reference[i], direct.min(axis=1).astype(np.uint32))


def test_power_sums_cached_and_long(monkeypatch: pytest.MonkeyPatch) -> None:
    base = int(minhash._WORD_BASE)
    expected = [sum(pow(base, j, M64) for j in range(k)) % M64 for k in range(40)]
    assert minhash._Powers(minhash._WORD_BASE).sums_upto(39).tolist() == expected
    monkeypatch.setattr(minhash, "_POW_CACHE", 8)
    powers = minhash._Powers(minhash._WORD_BASE)
    assert powers.sums_upto(39).tolist() == expected  # longer than the cache: built per call
    assert powers.sums_upto(5).tolist() == expected[:6]
    assert len(powers.sums) <= 9
