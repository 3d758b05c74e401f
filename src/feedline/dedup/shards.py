"""One shard through dedup: its documents read and named, its kept documents and verdict lines out.

Why one module: ``feedline download --dedup``, ``feedline dedup`` and the Ray executor's stages
each turn a JSON-lines shard into a kept ``.jsonl.zst`` shard and ``{"id", "shard", "verdict"}``
lines. Written three times, they named id-less documents three ways; here a document is read,
named (:func:`doc_id`), written and counted once, so the three give the same ids and the same
bytes for the same shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
import zstandard

from feedline.dedup.errors import DedupError
from feedline.io.atomic import AtomicFile
from feedline.io.jsonl import stream_jsonl
from feedline.run.outputs import InstallSet, output_path, refuse_inputs

from .engine import DEFAULT_CHUNK, Deduplicator

SUMMARY_NAME = "dedup.json"
VERDICTS_NAME = "verdicts.jsonl"

KINDS = ("kept", "exact_dup", "near_dup")
KEPT_ZSTD_LEVEL = 3
#: How :func:`doc_id` names an id-less document. The Ray stages record it in the markers of the
#: tasks that store or write ids, so a work dir made under the earlier rule redoes those tasks
#: (and only those) instead of mixing two spellings in one run's verdicts.
DOC_IDS = "output-name:line"

#: ``missing_text(source, line, number, text_field)``: the error for a document whose text field
#: is not a string (``number`` counts documents from 1, ``line`` is its line in the shard).
MissingText = Callable[[str, int, int, str], Exception]


def doc_id(doc: dict[str, Any], name: str, line: int) -> str:
    """A document's id in verdicts: its ``id`` field, else ``<name>:<line>``, where ``name`` is
    the shard's output name and ``line`` its 1-based line in the (decompressed) input shard, the
    line ``sed -n '<line>p'`` prints."""
    value = doc.get("id")
    return f"{name}:{line}" if value is None else str(value)


def _missing_text(source: str, line: int, number: int, text_field: str) -> Exception:
    return DedupError(f"{source}: document {number} has no string field {text_field!r} (use --text-field)")


class ShardDocuments:
    """``(line, document, text)`` for every document of one shard (local path or URL), in order.

    ``documents`` and ``bad_lines`` count what was read (bad lines are skipped only with
    ``skip_bad_lines``; otherwise the first one is the reader's one-line error)."""

    def __init__(
        self,
        source: str | os.PathLike[str],
        *,
        text_field: str = "text",
        skip_bad_lines: bool = False,
        missing_text: MissingText = _missing_text,
    ) -> None:
        self.source = str(source)
        self.text_field = text_field
        self.missing_text = missing_text
        self._stream = stream_jsonl(self.source, skip_bad_lines=skip_bad_lines)

    @property
    def documents(self) -> int:
        return self._stream.documents

    @property
    def bad_lines(self) -> int:
        return self._stream.bad_lines

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any], str]]:
        stream, field = self._stream, self.text_field
        for number, doc in enumerate(stream, 1):
            text = doc.get(field)
            if not isinstance(text, str):
                raise self.missing_text(self.source, stream.lines, number, field)
            yield stream.lines, doc, text


@dataclass
class ShardCounts:
    """What one shard held: documents read, their verdicts, bad lines skipped."""

    documents: int = 0
    kept: int = 0
    exact_dup: int = 0
    near_dup: int = 0
    bad_lines: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class KeptShard:
    """A kept shard being written: documents to ``path`` as zstd JSON lines, verdict lines to
    ``verdicts`` (a callable given each batch's lines as one bytes), ``batch`` documents at a
    time so memory is one batch, not the shard; ``on_flush(n)`` hears of each batch written.

    The shard is installed atomically by :meth:`close`, or, with ``installs``, left complete in
    its temp for the set to install with the run's other files (so a run failing on a later
    shard leaves none of them); :meth:`abort` (or leaving a ``with`` block on an exception)
    leaves whatever was at ``path`` before. zstd's output does not depend on how its input is
    cut, so any ``batch`` gives the same bytes.
    """

    def __init__(self, path: str | os.PathLike[str], label: str, verdicts: Callable[[bytes], None],
                 *, batch: int = 512, on_flush: Callable[[int], None] | None = None,
                 installs: InstallSet | None = None) -> None:
        self.label = label
        self.verdicts = verdicts
        self.batch = batch
        self.on_flush = on_flush
        self.counts = ShardCounts()
        self._kept: list[bytes] = []
        self._lines: list[bytes] = []
        self._deferred = installs is not None
        self._file = installs.add(Path(path)) if installs is not None else AtomicFile(Path(path))
        self._raw = self._file.handle
        self._writer = zstandard.ZstdCompressor(level=KEPT_ZSTD_LEVEL).stream_writer(self._raw, closefd=False)

    def add(self, doc_id: str, doc: dict[str, Any], kind: str, verdict: str) -> None:
        """One document and its verdict (``kind`` one of :data:`KINDS`)."""
        setattr(self.counts, kind, getattr(self.counts, kind) + 1)
        self.counts.documents += 1
        if kind == "kept":
            self._kept.append(orjson.dumps(doc) + b"\n")
        self._lines.append(orjson.dumps({"id": doc_id, "shard": self.label, "verdict": verdict}) + b"\n")
        if len(self._lines) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            self._writer.write(b"".join(self._kept))
            self.verdicts(b"".join(self._lines))
            if self.on_flush is not None:
                self.on_flush(len(self._lines))
            self._kept, self._lines = [], []

    def close(self) -> None:
        """Write the last batch, end the zstd frame and install the shard (or, deferred, finish
        its temp)."""
        try:
            self.flush()
            self._writer.close()  # ends the zstd frame; the file itself stays open for the install
        except BaseException:
            self._file.abort()
            raise
        if self._deferred:
            self._file.prepare()
        else:
            self._file.commit()

    def abort(self) -> None:
        """Drop what was written; whatever was at the path before stays."""
        self._file.abort()

    def __enter__(self) -> KeptShard:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        else:
            self.abort()


def dedup_shard(
    dedup: Deduplicator,
    documents: ShardDocuments,
    name: str,
    kept_path: str | os.PathLike[str],
    verdicts: Callable[[bytes], None],
    *,
    label: str | None = None,
    progress: Callable[[int], None] | None = None,
    installs: InstallSet | None = None,
) -> ShardCounts:
    """Deduplicate one shard's documents against everything ``dedup`` saw before (first
    occurrence wins), in batches of the engine's vectorised step: kept documents to
    ``kept_path``, verdict lines to ``verdicts``; returns the counts.

    ``name`` is the shard's output name (ids of id-less documents, :func:`doc_id`); ``label``
    the ``shard`` field of its verdict lines (default ``name``); ``progress(n)`` hears of every
    ``n`` documents decided; with ``installs`` the kept shard waits in its temp for the set's
    commit instead of being installed at once.
    """
    named = ((doc_id(doc, name, line), doc, text) for line, doc, text in documents)
    with KeptShard(kept_path, label or name, verdicts, batch=DEFAULT_CHUNK, on_flush=progress,
                   installs=installs) as kept:
        for (ident, doc, _text), verdict in dedup.stream(named, itemgetter(0), itemgetter(2)):
            kept.add(ident, doc, verdict.kind, str(verdict))
    counts = kept.counts
    counts.bad_lines = documents.bad_lines
    return counts


def check_outputs(
    sources: list[str], names: list[str], out_dir: Path, work_dir: Path | None = None
) -> list[Path]:
    """The kept shards' paths, once every output is known to be inside ``out_dir`` and none of
    them (kept shards, ``verdicts.jsonl``, ``dedup.json``, ``out_dir`` itself) is an input, nor
    an input inside ``work_dir``: a one-line error before anything is read or written, since an
    output equal to an input would replace it with its own deduplicated copy."""
    kept = [output_path(out_dir, name, error=DedupError) for name in names]
    advice = "choose another --out"
    outputs = [(out_dir, advice), *((p, advice) for p in kept),
               (out_dir / VERDICTS_NAME, advice), (out_dir / SUMMARY_NAME, advice)]
    folders = [] if work_dir is None else [(work_dir, "choose another --work-dir")]
    refuse_inputs(outputs, sources, error=DedupError, folders=folders)
    return kept
