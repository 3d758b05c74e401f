"""``gopher_v1``: the Gopher quality-rule measurements (Rae et al. 2021), Dolma's signal names.

Signals (document-level spans): ``fraction_of_characters_in_most_common_{2,3,4}grams``,
``fraction_of_characters_in_duplicate_{5..10}grams``, ``character_count``, ``word_count``,
``median_word_length``, ``symbol_to_word_ratio``, ``fraction_of_words_with_alpha_character``,
``required_word_count``, ``fraction_of_lines_starting_with_bullet_point``,
``fraction_of_lines_ending_with_ellipsis``, ``fraction_of_duplicate_lines``,
``fraction_of_characters_in_duplicate_lines``. Values equal Dolma's ``gopher_v1``.

Dolma counts 2- to 10-grams with Python ``Counter`` objects (~90 % of a typical tagging run);
here each n-gram gets an exact integer id from the (n-1)-gram id and the next word id, one
``np.unique`` per n, so there are no hash collisions and no tuples.
"""

from __future__ import annotations

from collections import Counter
from statistics import median

import numpy as np

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger

REQUIRED_ENGLISH_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
MOST_COMMON_NGRAMS = (2, 3, 4)
DUPLICATE_NGRAMS = (5, 6, 7, 8, 9, 10)
_SYMBOL, _ALPHA, _REQUIRED = 1, 2, 4
_FLAG_CACHE: dict[str, int] = {}
_FLAG_CACHE_LIMIT = 1_000_000


def _flags(word: str) -> int:
    flags = _FLAG_CACHE.get(word)
    if flags is None:
        flags = 0
        if "#" in word or "\u2026" in word:
            flags |= _SYMBOL
        if word.isalpha() or any(c.isalpha() for c in word):
            flags |= _ALPHA
        if word in REQUIRED_ENGLISH_WORDS:
            flags |= _REQUIRED
        if len(_FLAG_CACHE) >= _FLAG_CACHE_LIMIT:
            _FLAG_CACHE.clear()
        _FLAG_CACHE[word] = flags
    return flags


def ngram_fractions(words: list[str]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Most-common 2-4-gram and duplicate 5-10-gram character fractions, exactly as Dolma's."""
    index: dict[str, int] = {}
    ids = np.fromiter((index.setdefault(w, len(index)) for w in words), dtype=np.int64, count=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    word_chars = max(int(cumulative[-1]), 1)
    vocab = max(len(index), 1)
    most_common: list[tuple[int, float]] = []
    duplicate: list[tuple[int, float]] = []
    previous = ids
    for n in range(2, 11):
        count = len(words) - n + 1
        if count <= 0:
            break
        keys = previous[:-1] * vocab + ids[n - 1 :]
        _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        window_chars = cumulative[n:] - cumulative[:count]
        if n in MOST_COMMON_NGRAMS:
            top = counts.max()
            # Counter.most_common keeps insertion order among ties: the earliest n-gram wins.
            pick = int(first[np.flatnonzero(counts == top)].min())
            most_common.append((n, int(top) * int(window_chars[pick]) / word_chars))
        else:
            repeated = counts[inverse] > 1
            total = int(window_chars.sum())
            duplicate.append((n, int(window_chars[repeated].sum()) / max(total, 1)))
        previous = inverse.astype(np.int64, copy=False)
    return most_common, duplicate


@add_tagger("gopher_v1")
class Gopher(BaseTagger):
    """Gopher rule inputs: n-gram repetition, word statistics, bullet/ellipsis/duplicate lines."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        n_chars = len(text)
        stats = dict.fromkeys(
            (
                "word_count",
                "median_word_length",
                "symbol_to_word_ratio",
                "fraction_of_words_with_alpha_character",
                "required_word_count",
                "fraction_of_lines_starting_with_bullet_point",
                "fraction_of_lines_ending_with_ellipsis",
                "fraction_of_duplicate_lines",
                "fraction_of_characters_in_duplicate_lines",
            ),
            0.0,
        )
        spans: list[Span] = []
        if n_chars:
            words = text.split()
            word_count = len(words)
            stats["word_count"] = word_count
            if words:
                lengths = [len(w) for w in words]
                stats["median_word_length"] = float(median(lengths))
                flag_counts = Counter(_flags(w) for w in words)
                symbols = alpha = required = 0
                for flags, times in flag_counts.items():
                    if flags & _SYMBOL:
                        symbols += times
                    if flags & _ALPHA:
                        alpha += times
                    if flags & _REQUIRED:
                        required += times
                stats["symbol_to_word_ratio"] = symbols / word_count
                stats["fraction_of_words_with_alpha_character"] = alpha / word_count
                stats["required_word_count"] = required
                most_common, duplicate = ngram_fractions(words)
                spans.extend(
                    Span(0, n_chars, f"fraction_of_characters_in_most_common_{n}grams", v) for n, v in most_common
                )
                spans.extend(
                    Span(0, n_chars, f"fraction_of_characters_in_duplicate_{n}grams", v) for n, v in duplicate
                )
                word_chars = max(sum(lengths), 1)
            else:
                word_chars = 1
            lines = text.split("\n")
            bullets = sum(1 for line in lines if line.startswith(("*", "-")))
            ellipsis = sum(1 for line in lines if line.endswith("\u2026"))
            stats["fraction_of_lines_starting_with_bullet_point"] = bullets / len(lines)
            stats["fraction_of_lines_ending_with_ellipsis"] = ellipsis / len(lines)
            line_counts = Counter(lines)
            repeated = [(line, c) for line, c in line_counts.items() if c > 1]
            stats["fraction_of_duplicate_lines"] = sum(c for _, c in repeated) / len(lines)
            stats["fraction_of_characters_in_duplicate_lines"] = sum(len(x) * c for x, c in repeated) / word_chars
        spans.append(Span(0, n_chars, "character_count", n_chars))
        spans.extend(Span(0, n_chars, name, value) for name, value in stats.items())
        return DocResult(doc, spans)
