"""Document boundaries inside a window, from the file's ``.ds.index``: positions, ``sequence_id``,
``cu_seqlens``, the attention mask, and the loss mask.

Why from the index: the ends are already in memory (every ``.ds.index`` is read whole when the
dataset opens), so a window's boundaries are two binary searches, whatever token the documents
are separated by, and a window that starts inside a document knows it.

Two boundary modes say which side of a boundary the separator token belongs to, as llm-foundry's
``eos_token_id`` / ``bos_token_id`` do:

* ``"eos"`` (datatrove's, the default): each document ends with the separator its tokenizer
  appended, so a document starts at every index end (the token after the separator);
* ``"bos"``: the separator opens the document after it (GPT-2's ``<|endoftext|>`` read as BOS),
  so a document starts one token earlier, at the separator written last in each indexed document.

In a window of ``n`` tokens that holds ``k`` documents (or parts of them):

* ``positions``: 0 at the window's first token, restarting at every document start;
* ``sequence_id``: ``0 ... k-1``, the document of each token (llm-foundry's form);
* ``cu_seqlens``: int32, the ``k + 1`` cumulative starts ``[0, s1, ..., n]`` that varlen attention
  kernels take, padded with ``n`` to ``n + 1`` entries (a window never holds more documents than
  tokens) so the default collate stacks them; ``cu_seqlens_count`` is ``k + 1``.

A loss mask marks the tokens a loss is taken on, as targets: the stored ``.ds.loss`` bytes (one per
token, datatrove's ``DocumentTokenizer`` format; all ones without one), then optionally the token
after every document end (Megatron's ``eod_mask_loss``: predicting a new document from the end of
the last one) and the first token of every document (nanotron's label mask at document starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch only where a tensor is made: the corpus imports this module too
    import torch

__all__ = [
    "distinct_ends",
    "document_mask",
    "document_starts",
    "flat_cu_seqlens",
    "segments",
    "window_loss_mask",
]

def _shift(boundary: str) -> int:
    return 0 if boundary == "eos" else 1


def document_starts(doc_ends: np.ndarray, start: int, length: int, boundary: str = "eos") -> np.ndarray:
    """Offsets in the window of ``length`` tokens from file token ``start`` at which a document
    starts: 0 first, then every boundary inside the window, increasing (``doc_ends`` strictly
    increasing: :func:`distinct_ends`)."""
    shift = _shift(boundary)
    lo = int(np.searchsorted(doc_ends, start + shift, side="right"))
    hi = int(np.searchsorted(doc_ends, start + length - 1 + shift, side="right"))
    out = np.empty(hi - lo + 1, np.int64)
    out[0] = 0
    np.subtract(doc_ends[lo:hi], start + shift, out=out[1:])
    return out


def distinct_ends(doc_ends: np.ndarray) -> np.ndarray:
    """``doc_ends`` without the repeats empty documents make (they bound nothing)."""
    if doc_ends.size < 2 or bool(np.all(doc_ends[1:] > doc_ends[:-1])):
        return doc_ends
    return np.unique(doc_ends)


def segments(starts: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, sequence_id, padded cu_seqlens) of a window of ``length`` tokens whose
    documents start at ``starts`` (see the module docstring)."""
    k = int(starts.size)
    sequence_id = np.zeros(length, dtype=np.int64)
    sequence_id[starts[1:]] = 1
    np.cumsum(sequence_id, out=sequence_id)
    positions = np.arange(length, dtype=np.int64)
    positions -= starts[sequence_id]
    cu = np.full(length + 1, length, dtype=np.int32)
    cu[:k] = starts
    return positions, sequence_id, cu


def window_loss_mask(stored: np.ndarray | None, doc_ends: np.ndarray, start: int, length: int, *,
                     boundary: str = "eos", after_eos: bool = False, document_start: bool = False) -> np.ndarray:
    """Which of the file's tokens ``[start, start + length)`` a loss is taken on (bool): the
    stored ``.ds.loss`` bytes (all true when ``None``), less the token after every document end
    (``after_eos``) and every document's first token (``document_start``, by ``boundary``)."""
    mask = np.ones(length, dtype=bool) if stored is None else stored.astype(bool, copy=True)
    for on, shift in ((after_eos, 0), (document_start, _shift(boundary))):
        if not on:
            continue
        lo = int(np.searchsorted(doc_ends, start + shift, side="left"))
        hi = int(np.searchsorted(doc_ends, start + length + shift, side="left"))
        mask[doc_ends[lo:hi] - (start + shift)] = False
    if document_start and start == 0:
        mask[0] = False  # the file's first document has no end before it
    return mask


def document_mask(sequence_id: torch.Tensor) -> torch.Tensor:
    """The block-diagonal causal mask of ``sequence_id`` (``(n,)`` or ``(batch, n)``) for
    ``torch.nn.functional.scaled_dot_product_attention``'s ``attn_mask``: true where query ``i``
    may attend to key ``j`` (``j <= i``, same document); ``(n, n)`` or ``(batch, 1, n, n)``, so it
    broadcasts over heads."""
    import torch

    same = sequence_id.unsqueeze(-1) == sequence_id.unsqueeze(-2)
    n = sequence_id.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=sequence_id.device).tril()
    mask = same & causal
    return mask.unsqueeze(-3) if sequence_id.dim() == 2 else mask


def flat_cu_seqlens(cu_seqlens: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A batch's padded ``cu_seqlens`` ``(batch, n + 1)`` and ``cu_seqlens_count`` as the one int32
    ``cu_seqlens`` of the batch flattened to ``batch * n`` tokens, and its ``max_seqlen``: what
    ``flash_attn_varlen_func`` takes."""
    import torch

    n = int(cu_seqlens.shape[1]) - 1
    parts = [cu_seqlens[b, : int(counts[b]) - 1].to(torch.int64) + b * n for b in range(cu_seqlens.shape[0])]
    flat = torch.cat([*parts, torch.tensor([cu_seqlens.shape[0] * n])]).to(torch.int32)
    longest = int(torch.diff(flat).max()) if flat.numel() > 1 else 0
    return flat, longest
