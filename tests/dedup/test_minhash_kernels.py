"""The vectorised kernels agree with plain per-document definitions, on any batch shape.

Why: the kernels cut documents out of flat arrays (word boundaries, n-grams crossing document
ends, documents shorter than ``ngram``, kernel pieces cutting documents). A slip at a boundary
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
# short words, and words of 8, 9, 16, 17 and 25 bytes (one, two, three and four 8-byte chunks)
WORDS = st.sampled_from(
    ["a", "bb", "Ccc", "dd", "e\x1ff", "ünï", "x", "yy", "zzz", "abcdefgh", "abcdefghi",
     "ünïcödéwörds", "q" * 16, "r" * 17, "Straßenbahnhaltestellen"]
)
DOCS = st.lists(st.lists(WORDS, max_size=12).map(" ".join), min_size=1, max_size=10)


def _mix64(z: int) -> int:
    z ^= z >> 30
    z = z * 0xBF58476D1CE4E5B9 % M64
    z ^= z >> 27
    z = z * 0x94D049BB133111EB % M64
    return z ^ (z >> 31)


def _word_hash(word: str) -> int:
    """The documented word hash: a Horner polynomial over little-endian 8-byte chunks, seeded
    with the byte length, then mix64."""
    data = word.encode("utf-8")
    mult = int(minhash._CHUNK_MULT)
    chunks = [int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "little") for i in range(0, len(data), 8)]
    total = (chunks[0] * mult + len(data)) % M64
    for chunk in chunks[1:]:
        total = (total * mult + chunk) % M64
    return _mix64(total)


def _slots(hasher: MinHasher, shingles: list[int]) -> list[int]:
    """The documented signature of one document: one permutation into ``num_perm`` bins, the
    smallest hash per bin, empty bins filled by the probe sequence (optimal densification)."""
    k = hasher.num_perm
    a, salt = int(hasher._a), int(hasher._probe_salt)
    slots: list[int | None] = [None] * k
    for x in shingles:
        h = a * x % 2**32
        b = h * k >> 32
        slots[b] = h if slots[b] is None else min(slots[b], h)  # type: ignore[type-var]
    filled = []
    for i, slot in enumerate(slots):
        attempt = 0
        while slot is None:
            probe = _mix64(((i << 32) + attempt) ^ salt) >> 32
            slot = slots[probe * k >> 32]
            attempt += 1
        filled.append(slot)
    return filled


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
    hasher = MinHasher(num_perm=40, ngram=ngram, seed=3)  # 40 bins: not a power of two
    batch = hasher.shingle_batch(texts)
    sigs = hasher.signatures_from_shingles(batch)
    for i, text in enumerate(texts):
        expected = _shingles(hasher, text)
        got = batch.hashes[batch.offsets[i] : batch.offsets[i + 1]].tolist()
        assert got == expected
        if not expected:
            assert (sigs[i] == EMPTY_SLOT).all()
            continue
        assert sigs[i].tolist() == _slots(hasher, expected)


def test_kernel_pieces_split_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny kernel pieces cut documents anywhere (several per piece, one over several pieces,
    empty documents at a cut); the slots equal the one-document definition."""
    rng = np.random.default_rng(4)
    vocab = [f"w{i}" for i in range(50)]
    texts = [" ".join(rng.choice(vocab, int(rng.integers(0, 40))).tolist()) for _ in range(30)]
    hasher = MinHasher(num_perm=37, seed=9)  # 37 bins: not a power of two
    reference = hasher.signatures(texts)
    monkeypatch.setattr(minhash, "_OPH_PIECE", 16)
    assert np.array_equal(hasher.signatures(texts), reference)
    batch = hasher.shingle_batch(texts)
    for i in range(len(texts)):
        part = batch.hashes[batch.offsets[i] : batch.offsets[i + 1]].tolist()
        if part:
            assert reference[i].tolist() == _slots(hasher, part)
        else:
            assert (reference[i] == EMPTY_SLOT).all()


def test_densification_fills_every_bin_of_a_one_shingle_document() -> None:
    """One shingle lands in one bin; every other bin probes until it reaches that bin."""
    hasher = MinHasher(num_perm=128, seed=2)
    sig = hasher.signatures(["just five words right here"])[0]
    assert len(set(sig.tolist())) == 1 and sig[0] != EMPTY_SLOT


def test_powers_cached_and_long(monkeypatch: pytest.MonkeyPatch) -> None:
    base = int(minhash._SEQ_BASES[0])
    expected = [pow(base, j, M64) for j in range(40)]
    assert minhash._Powers(minhash._SEQ_BASES[0]).upto(40).tolist() == expected
    monkeypatch.setattr(minhash, "_POW_CACHE", 8)
    powers = minhash._Powers(minhash._SEQ_BASES[0])
    assert powers.upto(40).tolist() == expected  # longer than the cache: built per call
    assert powers.upto(5).tolist() == expected[:5]
    assert len(powers.values) <= 8


def test_a_bin_minimum_of_0xffffffff_is_a_filled_bin() -> None:
    """Emptiness is tracked apart from the slot values, so a shingle hashing to the largest
    value fills its bin (and a document with only that shingle still gets its slots)."""
    hasher = MinHasher(num_perm=16, seed=6)
    top = 0xFFFFFFFF * pow(int(hasher._a), -1, 2**32) % 2**32  # h(top) = 0xFFFFFFFF
    docs = [[top], [top, 12345, 987654321]]
    batch = minhash.ShingleBatch(
        np.array([x for d in docs for x in d], np.uint32),
        np.array([0, 1, 4], np.int64),
        np.zeros((2, 2), np.uint64),
    )
    sigs = hasher.signatures_from_shingles(batch)
    for i, doc in enumerate(docs):
        assert sigs[i].tolist() == _slots(hasher, doc)
