"""The mixer: join attributes to documents line by line, filter, replace spans, write shards.

Runs the streams of a Dolma ``mix`` config (read and checked by
:mod:`~feedline.curate.mixconfig`). Differences from Dolma on purpose: numbers compare by value
(see :mod:`~feedline.curate.jsonpath`), each expression is compiled once per run, a short, long
or misaligned attribute file is an error naming both files, shards are cut by *output* bytes
(a shard closes once its compressed size reaches ``max_size_in_bytes``) and all named
``<name>-NNNN.jsonl.gz`` (or ``.jsonl.zst``), and a stream's shards appear only when the whole
stream succeeded (:mod:`~feedline.curate.mixoutput`, which also decides what may be removed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from feedline.curate import files
from feedline.curate.documents import relative_name
from feedline.curate.errors import AlignmentError, CurateError
from feedline.curate.mixconfig import SpanReplacement, StreamConfig
from feedline.curate.mixoutput import (
    ShardWriter,
    check_output,
    discard_partial_output,
    remove_empty_summary_folder,
    summary_path,
)
from feedline.curate.runtime import attribute_path
from feedline.run.pool import pool_map
from feedline.run.progress import Progress
from feedline.validate import check_int

log = logging.getLogger("feedline.curate")
#: Progress goes to the parent every this many documents or seconds, whichever comes first.
PROGRESS_EVERY_DOCS = 1000
PROGRESS_EVERY_S = 0.5
#: ``$.attributes.name``, ``$.attributes['name']``; inside ``$.attributes[?(...)]``, ``@.name``.
_ATTR_DIRECT = re.compile(r"\$\.attributes(?:\.([\w\-]+)|\[['\"]([^'\"]+)['\"]\])")
_ATTR_FILTERED = re.compile(r"\$\.attributes\[\?\((.*)\)\]", re.S)
_AT_NAME = re.compile(r"@\.([\w\-]+)")


def attribute_names(expression: str) -> set[str]:
    """The attribute names a filter expression reads (``$.attributes...``), for the check that
    each was seen in at least one row."""
    names = {a or b for a, b in _ATTR_DIRECT.findall(expression)}
    for inner in _ATTR_FILTERED.findall(expression):
        names.update(_AT_NAME.findall(inner))
    return names


@dataclass
class FilterCount:
    """One include/exclude expression, evaluated on every document of its stream on its own.

    ``matched``: documents the expression matches. ``removed``: documents it alone drops, i.e.
    those an exclude matches or an include does not. A document two filters drop counts under
    both, so the counts may add up to more than the stream's removals.
    """

    kind: str
    expression: str
    matched: int = 0
    removed: int = 0


@dataclass
class StreamReport:
    name: str
    documents: int = 0
    kept: int = 0
    shards: list[str] = field(default_factory=list)
    bytes_written: int = 0
    filters: list[FilterCount] = field(default_factory=list)
    #: documents the include/exclude rule dropped (each once)
    removed_by_filters: int = 0
    #: documents kept by the filters but shorter than ``output.min_text_length`` after replacement
    removed_by_min_text_length: int = 0
    min_text_length: int = 0
    seconds: float = 0.0
    summary: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stream's summary as written next to its shards."""
        return {
            "stream": self.name,
            "documents": self.documents,
            "kept": self.kept,
            "removed": self.documents - self.kept,
            "removed_by_filters": self.removed_by_filters,
            "removed_by_min_text_length": self.removed_by_min_text_length,
            "filters": [dataclasses.asdict(f) for f in self.filters],
            "shards": self.shards,
            "bytes_written": self.bytes_written,
            "seconds": round(self.seconds, 3),
            "warnings": self.warnings,
        }

    def lines(self) -> Iterator[str]:
        folder = os.path.dirname(self.shards[0]) if self.shards else "-"
        yield (f"{self.name}: kept {self.kept:,} of {self.documents:,} documents into {len(self.shards)} shards "
               f"({self.bytes_written:,} bytes) under {folder}")
        removed = f"{self.name}:   removed {self.removed_by_filters:,} by the filters"
        if self.min_text_length:
            removed += (f", {self.removed_by_min_text_length:,} by output.min_text_length "
                        f"{self.min_text_length}")
        yield removed
        for f in self.filters:
            yield f"{self.name}:   {f.kind} {f.expression}: removed {f.removed:,} (matched {f.matched:,})"
        if self.summary:
            yield f"{self.name}:   summary: {self.summary}"


@dataclass
class MixReport:
    streams: list[StreamReport]
    seconds: float = 0.0

    def lines(self) -> Iterator[str]:
        for s in self.streams:
            yield from s.lines()

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "streams": [s.to_json() for s in self.streams]}


def count_filters(row: dict[str, Any], stream: StreamConfig, counts: list[FilterCount]) -> bool:
    """:func:`keep`, evaluating every expression (no short cut) to count each one on its own."""
    n_include = len(stream.include)
    any_include = False
    any_exclude = False
    for i, pattern in enumerate((*stream.include, *stream.exclude)):
        matched = pattern.matches(row)
        count = counts[i]
        if matched:
            count.matched += 1
        if i < n_include:
            any_include = any_include or matched
            if not matched:
                count.removed += 1
        elif matched:
            any_exclude = True
            count.removed += 1
    return (any_include or not n_include) and not any_exclude


def keep(row: dict[str, Any], stream: StreamConfig) -> bool:
    """Dolma's rule: kept when any include matches (or there is none) and no exclude matches."""
    if stream.include and not any(p.matches(row) for p in stream.include):
        return False
    return not any(p.matches(row) for p in stream.exclude)


def replace_spans(text: str, row: dict[str, Any], replacements: list[SpanReplacement]) -> str:
    """Replace passing spans (code-point offsets), earliest first; a span overlapping an
    earlier replaced one is skipped; ``{}`` in the replacement stands for the replaced text."""
    chosen: list[tuple[int, int, str]] = []
    for rule in replacements:
        for spans in rule.span.select(row):
            for span in spans if isinstance(spans, list) else ():
                if isinstance(span, list) and len(span) >= 3 and rule.passes(float(span[2])):
                    chosen.append((int(span[0]), int(span[1]), rule.replacement))
    if not chosen:
        return text
    chosen.sort(key=lambda s: (s[0], -s[1]))
    out: list[str] = []
    cursor = 0
    for start, end, replacement in chosen:
        start, end = max(start, 0), min(end, len(text))
        if start < cursor or end < start:
            continue
        out.append(text[cursor:start])
        out.append(replacement.replace("{}", text[start:end]) if replacement else "")
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _attribute_lines(paths: list[str], stack: Any) -> list[Iterator[bytes]]:
    readers = []
    for path in paths:
        if not files.exists(path):
            raise CurateError(f"{path}: attribute file missing")
        readers.append(stack.enter_context(files.open_lines(path)))
    return readers


class _Ticker:
    """Hands document counts to a progress callback in batches (every
    :data:`PROGRESS_EVERY_DOCS` documents or :data:`PROGRESS_EVERY_S` seconds)."""

    __slots__ = ("progress", "pending", "last")

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.pending = 0
        self.last = time.monotonic()

    def tick(self) -> None:
        self.pending += 1
        if self.pending >= PROGRESS_EVERY_DOCS or (self.pending & 63 == 0 and
                                                    time.monotonic() - self.last >= PROGRESS_EVERY_S):
            self.flush()

    def flush(self) -> None:
        if self.pending and self.progress is not None:
            self.progress(self.pending)
        self.pending = 0
        self.last = time.monotonic()


def mix_stream(stream: StreamConfig, progress: Callable[[int], None] | None = None,
               warnings: list[str] | None = None) -> StreamReport:
    """Mix one stream; returns counts and the shard paths; ``progress(n)`` gets document counts
    in batches while it runs; ``warnings`` (from :func:`check_output`) go into its report."""
    started = time.monotonic()
    report = StreamReport(stream.name, min_text_length=stream.min_text_length, warnings=list(warnings or ()))
    counts = [FilterCount("include", p.text) for p in stream.include] + [
        FilterCount("exclude", p.text) for p in stream.exclude]
    ticker = _Ticker(progress)
    writer = ShardWriter(stream)
    discard = stream.discard_fields
    wanted = {
        name: p.text for p in (*stream.include, *stream.exclude) for name in attribute_names(p.text)
    }
    seen: set[str] = set()
    try:
        for doc_path in files.expand(stream.documents):
            attr_paths = [attribute_path(doc_path, exp) for exp in stream.attributes]
            provenance = relative_name(doc_path, "")  # Dolma's form: the path below documents/
            with contextlib.ExitStack() as stack:
                attr_readers = _attribute_lines(attr_paths, stack)
                doc_lines = stack.enter_context(files.open_lines(doc_path))
                line_no = 0
                for line in doc_lines:
                    line_no += 1
                    report.documents += 1
                    ticker.tick()
                    try:
                        row = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise CurateError(f"{doc_path}: line {line_no}: invalid JSON ({exc})") from None
                    if attr_readers:
                        _merge_attributes(row, attr_readers, attr_paths, doc_path, line_no)
                    if wanted and len(seen) < len(wanted):
                        attrs = row.get("attributes")
                        if isinstance(attrs, dict):
                            seen.update(name for name in wanted if name in attrs)
                    if not count_filters(row, stream, counts):
                        report.removed_by_filters += 1
                        continue
                    if stream.span_replacement and isinstance(row.get("text"), str):
                        row["text"] = replace_spans(row["text"], row, stream.span_replacement)
                    if stream.min_text_length and len(row.get("text") or "") < stream.min_text_length:
                        report.removed_by_min_text_length += 1
                        continue
                    metadata = row.get("metadata")
                    if not isinstance(metadata, dict):
                        metadata = row["metadata"] = {}
                    metadata["provenance"] = f"{provenance}:{line_no}"
                    for name in discard:
                        row.pop(name, None)
                    writer.write(orjson.dumps(row) + b"\n")
                    report.kept += 1
                for path, reader in zip(attr_paths, attr_readers, strict=True):
                    if next(reader, None) is not None:
                        raise AlignmentError(
                            f"{path} has more rows than {doc_path} ({line_no}): attribute file does not match"
                        )
        # Dolma's semantics: a missing attribute is "no match", and rows may lack one. A name no
        # row has at all is most likely a typo, so it is said (with the count) rather than silent.
        for name in sorted(set(wanted) - seen):
            if report.documents:
                message = (
                    f"stream {stream.name!r}: filter {wanted[name]!r} reads attribute {name!r}, which "
                    f"none of the {report.documents:,} documents has "
                    f"(attributes: {', '.join(stream.attributes) or 'none listed'}); it matched nothing"
                )
                report.warnings.append(message)  # said by the caller (workers may not log)
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    finally:
        ticker.flush()
    report.shards = writer.shards
    report.bytes_written = writer.bytes_written
    report.filters = counts
    report.seconds = time.monotonic() - started
    # the summary is the run's record: written (atomically) only once every shard is in place
    report.summary = summary_path(stream)
    files.write_small(report.summary, json.dumps(report.to_json(), indent=2).encode() + b"\n")
    return report


def _merge_attributes(row: dict[str, Any], readers: list[Iterator[bytes]], paths: list[str], doc_path: str,
                      line_no: int) -> None:
    merged = row.get("attributes")
    if not isinstance(merged, dict):
        merged = row["attributes"] = {}
    for path, reader in zip(paths, readers, strict=True):
        line = next(reader, None)
        if line is None:
            raise AlignmentError(f"{path} ends at line {line_no - 1} but {doc_path} has more documents")
        try:
            attrs = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CurateError(f"{path}: line {line_no}: invalid JSON ({exc})") from None
        if not isinstance(attrs, dict) or attrs.get("id") != row.get("id"):
            found = attrs.get("id") if isinstance(attrs, dict) else None
            raise AlignmentError(
                f"{path} line {line_no} has id {found!r} but {doc_path} line {line_no} has id {row.get('id')!r}"
            )
        values = attrs.get("attributes")
        if not isinstance(values, dict):
            raise CurateError(f"{path}: line {line_no}: no `attributes` object")
        merged.update(values)


def _mix_stream_task(args: tuple[StreamConfig, list[str]], report: Callable[[int], None]) -> StreamReport:
    stream, warnings = args
    return mix_stream(stream, report, warnings)


def _stream_name(args: tuple[StreamConfig, list[str]]) -> str:
    return f"stream {args[0].name!r}"


def _discard_stream(args: tuple[StreamConfig, list[str]]) -> None:
    discard_partial_output(args[0])


def run_mix(streams: list[StreamConfig], processes: int = 1, show_progress: bool | None = None) -> MixReport:
    """Mix every stream (in parallel across streams when ``processes`` > 1), with a documents/s
    progress bar on a terminal (``show_progress`` forces it on or off).

    The first stream that fails stops the run: the streams still being mixed are dropped (their
    shards stay staged until the whole stream is done, and are removed) and the error reaches the
    caller. Every stream's output folder is checked first (:func:`check_output`), before any work.
    """
    check_int("processes", processes, minimum=1, error=CurateError)
    checked = [(stream, check_output(stream)) for stream in streams]
    started = time.monotonic()
    reports: list[StreamReport] = []
    # The documents have no total (counting them would cost a second pass); the streams do.
    try:
        with Progress("mix", unit="doc", counters={"streams": len(streams)}, scale=True,
                      enabled=show_progress) as progress:
            done = pool_map(_mix_stream_task, checked, processes=processes, progress=progress.update,
                            ordered=True, describe=_stream_name, cleanup=_discard_stream)
            with contextlib.closing(done):
                for report in done:
                    reports.append(report)
                    progress.count(streams=1)
    except BaseException:
        for stream in streams:  # every worker has stopped: no stream is about to write a summary
            remove_empty_summary_folder(stream)
        raise
    return MixReport(reports, time.monotonic() - started)
