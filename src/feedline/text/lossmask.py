"""``feedline tokenize --loss-mask FIELD``: a document's loss mask from a field of its JSON line.

The mask is written as ``X.ds.loss``, one byte a token (1: a loss is taken on the token, 0: not),
datatrove's ``DocumentTokenizer`` format, so ``TokenDataset(return_loss_mask=True)`` and readers of
datatrove's files read it. The field holds, per document:

* a boolean: every token of the document counts (``true``) or none does (``false``);
* a list of ``[start, end)`` character spans: with ``--loss-spans train`` (the default) the tokens
  inside them count and no other (to train on answers only), with ``--loss-spans ignore`` those
  tokens are the ones that do not (datatrove's ``no_loss_ranges``);
* nothing (the field missing or ``null``): every token counts, as datatrove does for a document
  without ranges.

A token is inside a span when its characters overlap it (a byte-level token that carries the
space before a word belongs to a span that starts at the word). The EOS after a document counts
when the document's last token does (training the end of an answer teaches the model to stop);
after a document of no tokens, when the field is ``true``, a ``train`` span list is not empty, or
an ``ignore`` one is. Unlike datatrove, no token is ever cut from the file: the tokens are those a
run without ``--loss-mask`` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from feedline.text.errors import DocumentError

__all__ = ["LOSS_SPAN_MODES", "LossValue", "encode_with_loss", "parse_loss_value"]

LOSS_SPAN_MODES = ("train", "ignore")

#: A document's parsed field: ``None`` (every token), a bool, or its spans.
LossValue = bool | tuple[tuple[int, int], ...] | None


def parse_loss_value(value: Any, text: str, field: str, where: str) -> LossValue:
    """The field of one document checked: a bool, ``None``, or spans within its text; anything
    else is a :class:`DocumentError` naming ``where`` (the file and document)."""
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, list):
        raise DocumentError(f"{where}: loss mask {field!r} is a {type(value).__name__}; give true/false "
                            "or a list of [start, end] character spans")
    spans = []
    for span in value:
        ok = (isinstance(span, list) and len(span) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in span))
        if not ok or not 0 <= span[0] <= span[1] <= len(text):
            raise DocumentError(f"{where}: loss mask {field!r} span {span!r} is not [start, end] with "
                                f"0 <= start <= end <= {len(text)} (the text's characters)")
        spans.append((int(span[0]), int(span[1])))
    return tuple(spans)


def _document_loss(offsets: np.ndarray, value: LossValue, spans_mode: str) -> np.ndarray:
    """One document's mask over its text tokens (``offsets``: their character ranges) and its EOS."""
    n = int(offsets.shape[0])
    if value is None or isinstance(value, bool):
        keep = value is not False
        return np.full(n + 1, keep, dtype=bool)
    inside = np.zeros(n, dtype=bool)
    for start, end in value:
        inside |= (offsets[:, 0] < end) & (offsets[:, 1] > start)
    text = inside if spans_mode == "train" else ~inside
    eos = bool(text[-1]) if n else (bool(value) if spans_mode == "train" else not value)
    return np.append(text, eos)


def encode_with_loss(tokenizer: Any, texts: Sequence[str], values: Sequence[LossValue], dtype: np.dtype,
                     spans_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens of every document with its EOS, concatenated; token counts; the loss mask of
    every token): the ids :func:`~feedline.text.tokenizer.encode_documents` gives, plus the mask."""
    if not texts:
        return np.empty(0, dtype), np.empty(0, np.int64), np.empty(0, bool)
    encodings = tokenizer.encode_batch(list(texts))  # the offsets need the full encoding
    ids = [e.ids for e in encodings]
    counts = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype, int(counts.sum()))
    masks = [_document_loss(np.asarray(e.offsets[:-1], dtype=np.int64).reshape(-1, 2), value, spans_mode)
             for e, value in zip(encodings, values, strict=True)]  # the last id is the EOS
    return flat, counts, np.concatenate(masks)
