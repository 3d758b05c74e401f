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

import re
from collections import Counter

import numpy as np
import regex

from feedline.curate.model import SCORE_PRECISION, DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger

REQUIRED_ENGLISH_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
MOST_COMMON_NGRAMS = (2, 3, 4)
DUPLICATE_NGRAMS = (5, 6, 7, 8, 9, 10)
# str.split() separators, so a regex "word" is exactly a str.split() word
STR_SPLIT_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)  # every c with c.isspace() (a test checks it against the running Python)
_SPACE = "".join(re.escape(c) for c in STR_SPLIT_WHITESPACE)
# a word with no letter (str.isalpha is Unicode category L*, as regex's \p{L})
_NO_LETTER_WORD = regex.compile(rf"(?:^|(?<=[{_SPACE}]))[^{_SPACE}\p{{L}}]+(?=[{_SPACE}]|$)")


_STAT_NAMES = (
    "word_count",
    "median_word_length",
    "symbol_to_word_ratio",
    "fraction_of_words_with_alpha_character",
    "required_word_count",
    "fraction_of_lines_starting_with_bullet_point",
    "fraction_of_lines_ending_with_ellipsis",
    "fraction_of_duplicate_lines",
    "fraction_of_characters_in_duplicate_lines",
)


def _line_stats(text: str, word_chars: int, stats: dict[str, float]) -> None:
    lines = text.split("\n")
    bullets = sum(1 for line in lines if line.startswith(("*", "-")))
    ellipsis = sum(1 for line in lines if line.endswith("\u2026"))
    stats["fraction_of_lines_starting_with_bullet_point"] = bullets / len(lines)
    stats["fraction_of_lines_ending_with_ellipsis"] = ellipsis / len(lines)
    repeated = [(line, c) for line, c in Counter(lines).items() if c > 1]
    stats["fraction_of_duplicate_lines"] = sum(c for _, c in repeated) / len(lines)
    stats["fraction_of_characters_in_duplicate_lines"] = sum(len(x) * c for x, c in repeated) / word_chars


def _symbol_words(words: list[str], text: str) -> int:
    if "#" not in text and "\u2026" not in text:
        return 0
    return sum(1 for w in words if "#" in w or "\u2026" in w)


def ngram_fractions(ids: np.ndarray, lengths: np.ndarray) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Most-common 2-4-gram and duplicate 5-10-gram character fractions, exactly as Dolma's.

    ``ids`` are per-document word ids, ``lengths`` the word lengths. An n-gram can only repeat
    where its (n-1)-gram prefix repeats, so each step sorts only those positions; once nothing
    repeats, the remaining values follow without any work.
    """
    total_words = len(ids)
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    word_chars = max(int(cumulative[-1]), 1)
    vocab = int(ids.max()) + 1 if total_words else 1
    most_common: list[tuple[int, float]] = []
    duplicate: list[tuple[int, float]] = []
    # (n-1)-gram ids where that (n-1)-gram occurs more than once, -1 elsewhere
    repeated_ids = np.where(np.bincount(ids)[ids] > 1, ids, -1)
    for n in range(2, 11):
        count = total_words - n + 1
        if count <= 0:
            break
        window_chars = cumulative[n:] - cumulative[:count]
        candidates = np.flatnonzero((repeated_ids[:count] >= 0) & (repeated_ids[1 : count + 1] >= 0))
        top = 1
        pick = 0
        repeated_chars = 0
        next_ids = np.full(count, -1, dtype=np.int64)
        if len(candidates):
            keys = repeated_ids[candidates] * vocab + ids[candidates + n - 1]
            _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
            per_position = counts[inverse]
            again = per_position > 1
            if again.any():
                top = int(counts.max())
                # Counter.most_common keeps insertion order among ties: the earliest n-gram wins.
                pick = int(candidates[first[counts == top]].min())
                repeated_chars = int(window_chars[candidates[again]].sum())
                next_ids[candidates[again]] = inverse[again]
        if n in MOST_COMMON_NGRAMS:
            most_common.append((n, top * int(window_chars[pick]) / word_chars))
        else:
            duplicate.append((n, repeated_chars / max(int(window_chars.sum()), 1)))
        repeated_ids = next_ids
    return most_common, duplicate


@add_tagger("gopher_v1")
class Gopher(BaseTagger):
    """Gopher rule inputs: n-gram repetition, word statistics, bullet/ellipsis/duplicate lines."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        n_chars = len(text)
        stats = dict.fromkeys(_STAT_NAMES, 0.0)
        spans: list[Span] = []
        if n_chars:
            words = text.split()
            word_count = len(words)
            stats["word_count"] = word_count
            if words:
                index: dict[str, int] = {}
                ids = np.fromiter((index.setdefault(w, len(index)) for w in words), np.int64, word_count)
                unique_lengths = np.fromiter(map(len, index), np.int64, len(index))
                occurrences = np.bincount(ids, minlength=len(index))
                lengths = unique_lengths[ids]
                stats["median_word_length"] = float(np.median(lengths))
                stats["symbol_to_word_ratio"] = _symbol_words(words, text) / word_count
                no_letter = len(_NO_LETTER_WORD.findall(text))
                stats["fraction_of_words_with_alpha_character"] = (word_count - no_letter) / word_count
                stats["required_word_count"] = sum(
                    int(occurrences[index[w]]) for w in REQUIRED_ENGLISH_WORDS if w in index
                )
                most_common, duplicate = ngram_fractions(ids, lengths)
                spans.extend(
                    Span(0, n_chars, f"fraction_of_characters_in_most_common_{n}grams", v) for n, v in most_common
                )
                spans.extend(
                    Span(0, n_chars, f"fraction_of_characters_in_duplicate_{n}grams", v) for n, v in duplicate
                )
                word_chars = max(int(lengths.sum()), 1)
            else:
                word_chars = 1
            _line_stats(text, word_chars, stats)
        spans.append(Span(0, n_chars, "character_count", n_chars))
        spans.extend(Span(0, n_chars, name, value) for name, value in stats.items())
        return DocResult(doc, spans)

    def tag_batch(self, docs: list[Document]) -> list[dict[str, list[tuple[int, int, float]]]]:
        return gopher_batch([doc.text for doc in docs])


def _scatter_max(target: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    np.maximum.at(target, index, values)


def batch_ngram_fractions(
    ids: np.ndarray, lengths: np.ndarray, doc_of_word: np.ndarray, starts: np.ndarray, counts: np.ndarray
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """:func:`ngram_fractions` for a whole batch of documents with one ``np.unique`` per n.

    ``ids`` are batch-wide word ids of all documents concatenated, ``doc_of_word`` the document
    of each word, ``starts``/``counts`` each document's first word and word count. Returns, per
    n, an array of per-document values (meaningful where the document has >= n words).
    """
    n_docs = len(starts)
    total = len(ids)
    vocab = int(ids.max()) + 1 if total else 1
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    word_chars = np.maximum(np.bincount(doc_of_word, weights=lengths, minlength=n_docs), 1.0)
    position = np.arange(total) - np.repeat(starts, counts)
    doc_length = np.repeat(counts, counts)
    # level 1: document-specific word ids, kept where the word occurs more than once in its doc
    _, inverse, occurrences = np.unique(doc_of_word.astype(np.int64) * vocab + ids, return_inverse=True,
                                        return_counts=True)
    repeated = np.where(occurrences[inverse] > 1, inverse, -1)
    most_common: dict[int, np.ndarray] = {}
    duplicate: dict[int, np.ndarray] = {}
    for n in range(2, 11):
        windows = total - n + 1
        if windows <= 0:
            break
        window_chars = cumulative[n : n + windows] - cumulative[:windows]
        valid = position[:windows] + n <= doc_length[:windows]
        candidates = np.flatnonzero(valid & (repeated[:windows] >= 0) & (repeated[1 : windows + 1] >= 0))
        next_repeated = np.full(windows, -1, dtype=np.int64)
        keys = repeated[candidates] * vocab + ids[candidates + n - 1]
        first, group_of, group_count = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)[1:]
        again = group_count[group_of] > 1
        next_repeated[candidates[again]] = group_of[again]
        if n in MOST_COMMON_NGRAMS:
            top = np.ones(n_docs, dtype=np.int64)
            pick = starts.copy()
            multi = group_count > 1
            if multi.any():
                group_first = candidates[first[multi]]
                group_doc = doc_of_word[group_first]
                _scatter_max(top, group_doc, group_count[multi])
                is_top = group_count[multi] == top[group_doc]
                earliest = np.full(n_docs, np.iinfo(np.int64).max, dtype=np.int64)
                np.minimum.at(earliest, group_doc[is_top], group_first[is_top])
                pick = np.where(top > 1, earliest, starts)
            safe_pick = np.minimum(pick, windows - 1)
            most_common[n] = (top * window_chars[safe_pick]) / word_chars
        else:
            repeated_positions = candidates[again]
            repeated_chars = np.bincount(doc_of_word[repeated_positions], weights=window_chars[repeated_positions],
                                         minlength=n_docs)
            all_chars = np.bincount(doc_of_word[:windows][valid], weights=window_chars[valid], minlength=n_docs)
            duplicate[n] = repeated_chars / np.maximum(all_chars, 1.0)
        repeated = next_repeated
    return most_common, duplicate


def gopher_batch(texts: list[str]) -> list[dict[str, list[tuple[int, int, float]]]]:
    """``Gopher().tag`` for many texts at once (same values; the n-gram work is batched)."""
    split = [t.split() for t in texts]
    counts = np.fromiter(map(len, split), np.int64, len(split))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    index: dict[str, int] = {}
    total = int(counts.sum())
    ids = np.fromiter((index.setdefault(w, len(index)) for words in split for w in words), np.int64, total)
    unique_lengths = np.fromiter(map(len, index), np.int64, len(index))
    lengths = unique_lengths[ids] if total else np.zeros(0, np.int64)
    doc_of_word = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
    most_common, duplicate = batch_ngram_fractions(ids, lengths, doc_of_word, starts, counts) if total else ({}, {})
    required_ids = [index[w] for w in REQUIRED_ENGLISH_WORDS if w in index]
    required = np.bincount(doc_of_word, weights=np.isin(ids, required_ids), minlength=len(texts))
    order = np.lexsort((lengths, doc_of_word))
    sorted_lengths = lengths[order]
    results = []
    for d, text in enumerate(texts):
        n_chars = len(text)
        stats = dict.fromkeys(_STAT_NAMES, 0.0)
        grouped: dict[str, list[tuple[int, int, float]]] = {}
        if n_chars:
            words = split[d]
            word_count = len(words)
            stats["word_count"] = word_count
            word_chars = 1
            if word_count:
                s = int(starts[d])
                stats["median_word_length"] = (int(sorted_lengths[s + (word_count - 1) // 2])
                                               + int(sorted_lengths[s + word_count // 2])) / 2
                stats["symbol_to_word_ratio"] = _symbol_words(words, text) / word_count
                no_letter = len(_NO_LETTER_WORD.findall(text))
                stats["fraction_of_words_with_alpha_character"] = (word_count - no_letter) / word_count
                stats["required_word_count"] = int(required[d])
                for n in MOST_COMMON_NGRAMS:
                    if word_count >= n:
                        grouped[f"fraction_of_characters_in_most_common_{n}grams"] = [
                            (0, n_chars, round(float(most_common[n][d]), SCORE_PRECISION))]
                for n in DUPLICATE_NGRAMS:
                    if word_count >= n:
                        grouped[f"fraction_of_characters_in_duplicate_{n}grams"] = [
                            (0, n_chars, round(float(duplicate[n][d]), SCORE_PRECISION))]
                word_chars = max(int(unique_lengths[ids[s : s + word_count]].sum()), 1)
            _line_stats(text, word_chars, stats)
        grouped["character_count"] = [(0, n_chars, float(n_chars))]
        for name, value in stats.items():
            grouped[name] = [(0, n_chars, round(float(value), SCORE_PRECISION))]
        results.append(grouped)
    return results
