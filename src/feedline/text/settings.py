"""``TokenDataset``'s settings: the floor's rows under the token reader's keywords, and its own.

Why a table: the knobs the scheduler reads (pool, strategy, prefetch, byte budget, threads,
queue, seed, outage, replication, evening out) are the floor's rows (:data:`~feedline.streaming.settings.FLOOR_ROWS`),
with the same unit and checks as the episode reader's: the byte budget is ``byte_budget_gb`` in
both. Keywords an earlier release took (``byte_budget_mb``, ``strategy``) still work, with a
warning naming the new one.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from feedline.streaming.errors import StreamingError
from feedline.streaming.settings import DEFAULT_SEED, ReaderSettings, floor_field, reader_field

__all__ = ["DEFAULTS", "TextSettings", "renamed_keywords"]


#: ``boundary``'s modes (:mod:`feedline.text.boundaries`).
BOUNDARY_MODES = ("eos", "bos")


def check_boundary(value: Any) -> str:
    """``boundary``'s check: one of :data:`BOUNDARY_MODES`."""
    if value not in BOUNDARY_MODES:
        raise StreamingError(f"boundary must be 'eos' (documents end with the separator, datatrove's) "
                             f"or 'bos' (the separator starts a document), got {value!r}")
    return str(value)


#: ``packing``'s modes and ``remainder``'s (:mod:`feedline.text.packing`).
PACKING_MODES = ("cut", "best_fit")
REMAINDERS = ("pad", "crop")


def check_packing(value: Any) -> str:
    """``packing``'s check: one of :data:`PACKING_MODES`."""
    if value not in PACKING_MODES:
        raise StreamingError(f"packing must be 'cut' (datatrove's windows across documents) or 'best_fit' "
                             f"(rows that start at a document), got {value!r}")
    return str(value)


def check_remainder(value: Any) -> str:
    """``remainder``'s check: one of :data:`REMAINDERS`."""
    if value not in REMAINDERS:
        raise StreamingError(f"remainder must be 'pad' (padded and masked) or 'crop' (filled with a "
                             f"cropped document), got {value!r}")
    return str(value)


@dataclass(frozen=True)
class TextSettings(ReaderSettings):
    """The token reader's settings, validated once.

    Args:
        pool_size: chunks mixed at once per rank (each worker's pool holds 1/N).
        sampling_strategy: the pool's strategy name.
        prefetch_chunks: chunks each worker fetches ahead of what its pool needs.
        byte_budget_gb: GiB of fetched tokens held per rank (1/N per worker).
        fetch_threads: ranged reads in flight per worker.
        assemble_threads: threads per worker cutting windows (0: on the iterating thread).
        queue_size: windows each worker holds ready ahead.
        seed: the order seed; ``None`` is the fixed streaming seed (stored resolved).
        allow_order_change: resume under other order settings at an epoch boundary.
        outage_s: how long the store may fail before the epoch stops.
        replication: consecutive ranks that read identical windows.
        even_batches: how every rank comes to the same number of batches (pad, drop, none).
        boundary: which side of a document boundary the separator token is on (``eos``/``bos``).
        return_sequence_id: add each token's document number in the window.
        return_cu_seqlens: add the window's padded cumulative document starts and their count.
        return_loss_mask: add which tokens a loss is taken on.
        mask_after_eos: the loss mask drops the token after every document end.
        mask_document_start: the loss mask drops every document's first token.
        ignore_index: labels the loss mask drops take this value (``None``: none are changed).
        packing: ``cut`` windows across documents, or ``best_fit`` rows that start at one.
        remainder: what fills a ``best_fit`` row's room: ``pad`` or ``crop``.
        pad_id: the token id of padding.
    """

    pool_size: int = floor_field("pool_size", 64, unit="chunks per rank, /N per worker")
    sampling_strategy: str = floor_field("sampling_strategy", "remaining")
    prefetch_chunks: int = floor_field("prefetch", 8, unit="chunks per worker")
    byte_budget_gb: float = floor_field("byte_budget_gb", 0.5)
    fetch_threads: int = floor_field("fetch_threads", 8, unit="chunks per worker")
    assemble_threads: int = floor_field("assemble_threads", 0)
    queue_size: int = floor_field("queue_size", 64, unit="windows per worker")
    seed: int | None = floor_field("seed", DEFAULT_SEED)
    allow_order_change: bool = floor_field("allow_order_change", False)
    outage_s: float = floor_field("outage_s", 60.0)
    replication: int = floor_field("replication", 1)
    even_batches: str = floor_field("even_batches", "pad")
    boundary: str = reader_field(
        "eos", kind=str, unit="mode", flag="", check=check_boundary,
        help="`eos`: documents end with the separator (datatrove's); `bos`: it starts them")
    return_sequence_id: bool = reader_field(
        False, kind=bool, unit="flag", flag="",
        help="add `sequence_id`: each token's document in the window, from 0 (llm-foundry's)")
    return_cu_seqlens: bool = reader_field(
        False, kind=bool, unit="flag", flag="",
        help="add `cu_seqlens` (int32, padded with the length to length + 1) and `cu_seqlens_count`")
    return_loss_mask: bool = reader_field(
        False, kind=bool, unit="flag", flag="",
        help="add `loss_mask`: `.ds.loss` where there is one (else all true), less the options below")
    mask_after_eos: bool = reader_field(
        False, kind=bool, unit="flag", flag="",
        help="the loss mask drops the token after every document end (Megatron's `eod_mask_loss`)")
    mask_document_start: bool = reader_field(
        False, kind=bool, unit="flag", flag="",
        help="the loss mask drops every document's first token, by `boundary`")
    ignore_index: int | None = reader_field(
        None, kind=int, unit="label id", flag="", optional=True,
        help="with `labels`, labels the loss mask drops become this (`-100`: cross_entropy's default)")
    packing: str = reader_field(
        "cut", kind=str, unit="mode", flag="", check=check_packing,
        help="`cut`: datatrove's windows across documents; `best_fit`: rows that each start at a document")
    remainder: str = reader_field(
        "pad", kind=str, unit="mode", flag="", check=check_remainder,
        help="a `best_fit` row's room: `pad` (padded, dropped from the loss mask) or `crop` (a cropped document)")
    pad_id: int = reader_field(
        0, kind=int, unit="token id", flag="", minimum=0,
        help="the token id padding holds (`best_fit` with `remainder=\"pad\"`)")


#: The token reader's defaults, as one value: ``TokenDataset``'s signature reads them here, so a
#: default changed in the table is the constructor's too.
DEFAULTS = TextSettings()


#: Keywords of earlier releases: old name -> (new name, how a value converts).
_RENAMED = {
    "byte_budget_mb": ("byte_budget_gb", lambda mb: float(mb) / 1024),
    "strategy": ("sampling_strategy", lambda value: value),
}


def renamed_keywords(options: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the old keywords of ``options`` turned into the new ones (one warning
    each); a keyword given both ways is refused."""
    out = dict(given)
    for old, value in options.items():
        if old not in _RENAMED:
            raise TypeError(f"TokenDataset() got an unexpected keyword argument {old!r}")
        new, convert = _RENAMED[old]
        if new in out:
            raise TypeError(f"TokenDataset(): give {new} or its old name {old}, not both")
        warnings.warn(f"TokenDataset({old}=...) is now {new}", DeprecationWarning, stacklevel=3)
        out[new] = convert(value)
    return out
