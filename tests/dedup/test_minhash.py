"""MinHash: shingles match the definition, signatures are seeded, reproducible and unbiased."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.dedup.minhash import (
    EMPTY_SLOT,
    MinHasher,
    estimated_jaccard,
    jaccard,
    normalize_words,
    word_hashes,
)

from .planted_corpus import make_corpus, oracle_jaccard, oracle_shingles

WORDS = st.sampled_from(["alpha", "beta", "Gamma", "delta", "eps", "zeta", "ETA", "theta", "x"])
TEXTS = st.lists(WORDS, min_size=0, max_size=40).map(" ".join)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(400, 300, 50, seed=11, j_range=(0.3, 1.0))


def test_signature_shape_dtype_and_empty_text() -> None:
    sigs = MinHasher(num_perm=64).signatures(["one two three four five six", "", "   "])
    assert sigs.shape == (3, 64) and sigs.dtype == np.uint32
    assert (sigs[1] == EMPTY_SLOT).all() and (sigs[2] == EMPTY_SLOT).all()
    assert not (sigs[0] == EMPTY_SLOT).all()


def test_shingle_counts_follow_the_definition() -> None:
    hasher = MinHasher(ngram=5)
    batch = hasher.shingle_batch(["a b c d e f g", "a b c", "", "a b c d e"])
    assert batch.counts().tolist() == [3, 1, 0, 1]
    # short texts: one shingle of all words, order-sensitive
    other = hasher.shingle_batch(["c b a", "a b c"])
    assert other.hashes[0] != other.hashes[1]
    assert other.hashes[1] == batch.hashes[3]


@settings(max_examples=60, deadline=None)
@given(a=TEXTS, b=TEXTS, n=st.integers(1, 6))
def test_shingle_jaccard_equals_the_oracle(a: str, b: str, n: int) -> None:
    batch = MinHasher(ngram=n).shingle_batch([a, b])
    assert len(batch.shingle_set(0)) == len(oracle_shingles(a, n))
    assert jaccard(batch.shingle_set(0), batch.shingle_set(1)) == pytest.approx(
        oracle_jaccard(a, b, n)
    )


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(TEXTS, min_size=1, max_size=12))
def test_signatures_do_not_depend_on_batch_composition(texts: list[str]) -> None:
    hasher = MinHasher(num_perm=32, seed=5)
    together = hasher.signatures(texts)
    alone = np.vstack([hasher.signatures([t]) for t in texts])
    assert np.array_equal(together, alone)


def test_normalisation_case_whitespace_and_unicode() -> None:
    assert normalize_words("  The\tQUICK\nbrown  ") == ["the", "quick", "brown"]
    assert normalize_words("ﬁne\u3000Ｗｏｒｄ") == ["fine", "word"]  # NFKC + ideographic space
    hasher = MinHasher()
    keys = hasher.shingle_batch(["Hello   World  again", "hello world AGAIN", "hello world again!"])
    assert (keys.exact_keys[0] == keys.exact_keys[1]).all()
    assert not (keys.exact_keys[0] == keys.exact_keys[2]).all()
    # word hashes: the same word hashes the same wherever it is, ASCII or not
    h, counts = word_hashes(["über x", "x Über"])
    assert counts.tolist() == [2, 2] and h[0] == h[3] and h[1] == h[2]
    # control bytes str.split() treats as whitespace also separate words in the byte tokenizer
    assert word_hashes(["a\x1fb"])[1].tolist() == [2]


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_byte_tokenizer_agrees_with_the_definition(text: str) -> None:
    """For any text the vectorised tokenizer sees exactly ``normalize_words(text)``."""
    words = normalize_words(text)
    hashes, counts = word_hashes([text])
    assert counts.tolist() == [len(words)]
    reference, _ = word_hashes([" ".join(words)])
    assert np.array_equal(hashes, reference)
    if words:
        singles = np.concatenate([word_hashes([w])[0] for w in words])
        assert np.array_equal(hashes, singles)


def test_seed_determines_the_family() -> None:
    texts = ["the same words in the same order every time " * 3, "another text of words"]
    a = MinHasher(seed=7).signatures(texts)
    b = MinHasher(seed=7).signatures(texts)
    c = MinHasher(seed=8).signatures(texts)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_signatures_identical_in_another_process() -> None:
    """No dependence on PYTHONHASHSEED or process state: a fresh interpreter agrees."""
    texts = ["reproducible across processes and machines " * 4, "ünïcödé wörds ﬁne"]
    here = MinHasher(seed=3).signatures(texts)
    code = (
        "import sys, numpy as np; from feedline.dedup.minhash import MinHasher;"
        f"sys.stdout.write(MinHasher(seed=3).signatures({texts!r}).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out == here.tobytes().hex()


def test_estimate_is_unbiased_against_the_oracle(corpus) -> None:
    hasher = MinHasher(num_perm=128, seed=1)
    sigs = hasher.signatures(corpus.texts)
    errors = np.array([estimated_jaccard(sigs[a], sigs[b]) - j for a, b, j in corpus.near_pairs])
    # binomial sd at J=0.8 with 128 slots is ~0.035: mean error must be near 0, MAE near 0.028
    assert abs(errors.mean()) < 0.01
    assert np.abs(errors).mean() < 0.04
    # unrelated documents look unrelated
    unrelated = estimated_jaccard(sigs[:-1], sigs[1:])
    assert np.median(unrelated) < 0.02


def test_long_documents_take_bounded_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Huge texts are tokenised in pieces, their exact keys use powers built on the fly, and the
    signature kernel takes their shingles piece by piece; the results equal the one-shot
    computation."""
    import feedline.dedup.minhash as minhash

    rng = np.random.default_rng(0)
    text = " ".join(rng.choice([f"w{i}" for i in range(3000)], 30_000).tolist())
    texts = [text, "a short one here and there", text[:2000]]
    hasher = MinHasher()
    reference = hasher.signatures(texts)
    reference_keys = hasher.shingle_batch(texts).exact_keys
    batch = hasher.shingle_batch([text])
    h = batch.hashes * hasher._a
    bins = (h.astype(np.uint64) * np.uint64(hasher.num_perm)) >> np.uint64(32)
    direct = [int(h[bins == b].min()) for b in range(hasher.num_perm)]  # no bin is empty here
    assert reference[0].tolist() == direct
    monkeypatch.setattr(minhash, "_MAX_PIECE_CHARS", 4000)
    monkeypatch.setattr(minhash, "_OPH_PIECE", 1000)
    monkeypatch.setattr(minhash, "_POW_CACHE", 1 << 10)
    monkeypatch.setattr(minhash, "_SEQ_POW", tuple(minhash._Powers(b) for b in minhash._SEQ_BASES))
    monkeypatch.setattr(
        minhash, "_SEQ_POW_INV", tuple(minhash._Powers(p.base) for p in minhash._SEQ_POW_INV)
    )
    assert np.array_equal(MinHasher().signatures(texts), reference)
    assert np.array_equal(MinHasher().shingle_batch(texts).exact_keys, reference_keys)
    assert all(len(p.values) <= 1 << 10 for p in minhash._SEQ_POW)
