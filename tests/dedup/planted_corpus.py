"""A generated corpus with planted duplicates at known Jaccard levels, plus a pure-Python oracle.

Near-duplicates are built by substituting words at positions at least ``ngram`` apart: each
substitution removes exactly ``ngram`` shingles of the original and adds ``ngram`` new ones, so
``k`` substitutions in a document with ``S`` shingles give ``J = (S - n k) / (S + n k)``; we pick
``k`` for a target J. The oracle recomputes every J from word tuples, independent of feedline's
hashing, so tests and the benchmark measure against ground truth, not against the target.
Used by tests/acquire and bench/minhash.py.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field


def oracle_shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Word n-gram shingles by definition (lower-case, whitespace split), no hashing."""
    words = text.lower().split()
    if not words:
        return set()
    if len(words) < n:
        return {tuple(words)}
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def oracle_jaccard(a: str, b: str, n: int = 5) -> float:
    sa, sb = oracle_shingles(a, n), oracle_shingles(b, n)
    if not sa and not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


@dataclass
class PlantedCorpus:
    ids: list[str]
    texts: list[str]
    # (earlier index, later index, oracle Jaccard) for every planted near-duplicate pair
    near_pairs: list[tuple[int, int, float]] = field(default_factory=list)
    # (earlier index, later index) for every planted exact (normalised) copy
    exact_pairs: list[tuple[int, int]] = field(default_factory=list)


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choices(letters, k=rng.randint(2, 9))))
    return sorted(words)


def make_corpus(
    n_unique: int,
    n_near: int,
    n_exact: int,
    *,
    seed: int = 0,
    words_per_doc: tuple[int, int] = (280, 380),
    j_range: tuple[float, float] = (0.5, 1.0),
    ngram: int = 5,
    vocab_size: int = 40_000,
) -> PlantedCorpus:
    """``n_unique`` originals (~2 KB each, Zipf-like vocabulary), ``n_near`` substituted variants
    with target J uniform in ``j_range``, ``n_exact`` copies differing only in case/whitespace;
    variants and copies are placed after their original at random positions."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng, vocab_size)
    cum_weights = list(itertools.accumulate(1.0 / (r + 10) for r in range(len(vocab))))  # Zipf-like
    originals = []
    for _ in range(n_unique):
        originals.append(rng.choices(vocab, cum_weights=cum_weights, k=rng.randint(*words_per_doc)))
    # order: originals first in random order, then derived documents interleaved after them
    docs: list[tuple[str, list[str], int | None, str]] = [
        (f"u{i}", w, None, "orig") for i, w in enumerate(originals)
    ]
    for i in range(n_near):
        src = rng.randrange(n_unique)
        base = originals[src]
        shingles = len(base) - ngram + 1
        target = rng.uniform(*j_range)
        k = round(shingles * (1 - target) / (ngram * (1 + target)))
        slots = rng.sample(range(len(base) // ngram), min(k, len(base) // ngram))
        variant = list(base)
        for slot in slots:
            pos = slot * ngram
            new = rng.choice(vocab)
            while new == variant[pos]:
                new = rng.choice(vocab)
            variant[pos] = new
        docs.append((f"n{i}", variant, src, "near"))
    for i in range(n_exact):
        src = rng.randrange(n_unique)
        copy = [w.upper() if rng.random() < 0.1 else w for w in originals[src]]
        docs.append((f"e{i}", copy, src, "exact"))
    # random order in which every derived document comes somewhere after its original
    keys = [rng.random() for _ in range(n_unique)]
    for d in range(n_unique, len(docs)):
        src = docs[d][2]
        assert src is not None
        keys.append(rng.uniform(keys[src], 1.0))
    stream = sorted(range(len(docs)), key=keys.__getitem__)
    corpus = PlantedCorpus(ids=[], texts=[])
    position: dict[int, int] = {}
    for d in stream:
        doc_id, words, _src, _kind = docs[d]
        position[d] = len(corpus.ids)
        corpus.ids.append(doc_id)
        sep = "  " if _kind == "exact" else " "
        corpus.texts.append(sep.join(words))
    for d in range(n_unique, len(docs)):
        _id, _words, src, kind = docs[d]
        assert src is not None
        a, b = position[src], position[d]
        if kind == "near":
            corpus.near_pairs.append(
                (a, b, oracle_jaccard(corpus.texts[a], corpus.texts[b], ngram))
            )
        else:
            corpus.exact_pairs.append((a, b))
    return corpus
