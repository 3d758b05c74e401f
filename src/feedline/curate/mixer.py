"""The mixer: join attributes to documents line by line, filter, replace spans, write shards.

Reads Dolma's ``mix`` config (``streams[]``: ``name``, ``documents``, ``attributes``,
``filter.include/exclude``, ``span_replacement[]``, ``output{path, max_size_in_bytes,
discard_fields, min_text_length}``). Differences from Dolma on purpose: numbers compare by value
(see :mod:`~feedline.curate.jsonpath`), each expression is compiled once per run, a short, long
or misaligned attribute file is an error naming both files, shards are cut by *output* bytes
(a shard closes once its compressed size reaches ``max_size_in_bytes``) and all named ``<name>-NNNN.jsonl.gz`` (or ``.jsonl.zst``), and each shard appears atomically.
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
import yaml

from feedline.curate import files
from feedline.curate.errors import AlignmentError, CurateError
from feedline.curate.jsonpath import JsonPath
from feedline.curate.runtime import attribute_path, relative_name
from feedline.io.paths import is_url
from feedline.run.pool import pool_map
from feedline.run.progress import Progress
from feedline.validate import check_int

log = logging.getLogger("feedline.curate")
_EXTENSIONS = {"gz": ".jsonl.gz", "zst": ".jsonl.zst", "": ".jsonl"}
SUMMARY_FOLDER = ".feedline-mix"
#: Progress goes to the parent every this many documents or seconds, whichever comes first.
PROGRESS_EVERY_DOCS = 1000
PROGRESS_EVERY_S = 0.5
DEFAULT_SHARD_BYTES = 1 << 30  # a shard closes at 1 GiB compressed unless output.max_size_in_bytes says
_STREAM_KEYS = {"name", "documents", "attributes", "filter", "span_replacement", "output", "compression"}
#: Top-level keys of Dolma's mixer config; ``work_dir`` is accepted with a warning that it is unused.
_TOP_KEYS = {"streams", "processes", "work_dir"}
_FILTER_KEYS = {"include", "exclude", "syntax"}
_OUTPUT_KEYS = {"path", "max_size_in_bytes", "discard_fields", "min_text_length", "compression"}
#: ``$.attributes.name``, ``$.attributes['name']``; inside ``$.attributes[?(...)]``, ``@.name``.
_ATTR_DIRECT = re.compile(r"\$\.attributes(?:\.([\w\-]+)|\[['\"]([^'\"]+)['\"]\])")
_ATTR_FILTERED = re.compile(r"\$\.attributes\[\?\((.*)\)\]", re.S)
_AT_NAME = re.compile(r"@\.([\w\-]+)")


@dataclass(frozen=True)
class SpanReplacement:
    """Replace spans at ``span`` (a JSONPath to [[start, end, score]...]) whose score passes."""

    span: JsonPath
    replacement: str
    min_score: float | None = None
    max_score: float | None = None

    def passes(self, score: float) -> bool:
        if self.min_score is not None and score < self.min_score:
            return False
        return not (self.max_score is not None and score > self.max_score)


@dataclass(frozen=True)
class StreamConfig:
    name: str
    documents: list[str]
    attributes: list[str]
    include: list[JsonPath]
    exclude: list[JsonPath]
    span_replacement: list[SpanReplacement]
    output_path: str
    max_size_in_bytes: int
    discard_fields: list[str]
    min_text_length: int
    compression: str


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


def summary_path(stream: StreamConfig) -> str:
    """``<output.path>/.feedline-mix/<name>.json``: beside the shards, but hidden, so a glob over
    the mixed folder (``*``, ``*.gz``) never reads it as documents."""
    return f"{stream.output_path}/{SUMMARY_FOLDER}/{stream.name}.json"



def load_config(path: str) -> list[StreamConfig]:
    """Parse and validate a mixer config; every JSONPath is compiled here, once."""
    return parse_config(_read_config(path), path)


def load_mix(path: str) -> tuple[list[StreamConfig], int | None]:
    """The streams and the config's ``processes`` (``None`` when unset)."""
    raw = _read_config(path)
    return parse_config(raw, path), config_processes(raw, path)


def _read_config(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle) if path.endswith((".yaml", ".yml")) else json.load(handle)
    except FileNotFoundError:
        raise CurateError(f"{path}: no such mixer config") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise CurateError(f"{path}: not valid YAML/JSON ({exc})") from None
    return raw


def config_processes(raw: Any, where: str = "mixer config") -> int | None:
    """The config's ``processes`` (Dolma's key), or ``None`` when it does not set one."""
    value = raw.get("processes") if isinstance(raw, dict) else None
    if value is None:
        return None
    return check_int(f"{where}: processes", value, minimum=1, error=CurateError)


def parse_config(raw: Any, where: str = "mixer config") -> list[StreamConfig]:
    if not isinstance(raw, dict) or not isinstance(raw.get("streams"), list) or not raw["streams"]:
        raise CurateError(f"{where}: needs a non-empty `streams` list")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise CurateError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, sorted(unknown)))} "
            f"(known: {', '.join(sorted(_TOP_KEYS))})"
        )
    work_dir = raw.get("work_dir")
    if work_dir is not None:
        # Dolma stages inputs and outputs in work_dir; feedline reads in place and writes each
        # shard atomically, so it has no use for one. Accepted (Dolma configs carry it) and said.
        if not isinstance(work_dir, dict) or set(work_dir) - {"input", "output"}:
            raise CurateError(f"{where}: `work_dir` must be a mapping with `input` and/or `output`")
        log.warning(
            "%s: work_dir is not used: feedline reads documents in place and writes each shard "
            "atomically to output.path",
            where,
        )
    config_processes(raw, where)
    streams = []
    for i, stream in enumerate(raw["streams"]):
        at = f"{where}: streams[{i}]"
        if not isinstance(stream, dict):
            raise CurateError(f"{at}: must be a mapping")
        unknown = set(stream) - _STREAM_KEYS
        if unknown:
            raise CurateError(f"{at}: unknown keys {sorted(unknown)}")
        for section, known in (("filter", _FILTER_KEYS), ("output", _OUTPUT_KEYS)):
            value = stream.get(section)
            if isinstance(value, dict) and set(value) - known:
                raise CurateError(f"{at}: unknown keys in `{section}`: {sorted(set(value) - known)}")
        for key in ("name", "documents", "output"):
            if key not in stream:
                raise CurateError(f"{at}: missing `{key}`")
        output = stream["output"]
        if not isinstance(output, dict) or "path" not in output:
            raise CurateError(f"{at}: `output` needs a `path`")
        filt = stream.get("filter") or {}
        if filt.get("syntax", "jsonpath") != "jsonpath":
            raise CurateError(f"{at}: filter syntax {filt['syntax']!r} is not supported (use jsonpath)")
        compression = output.get("compression") or _output_compression(stream.get("compression"))
        if compression in ("gzip", "gz"):
            compression = "gz"
        elif compression in ("zst", "zstd"):
            compression = "zst"
        elif compression in ("none", ""):
            compression = ""
        else:
            raise CurateError(f"{at}: unknown output compression {compression!r} (gz, zst or none)")
        streams.append(
            StreamConfig(
                name=str(stream["name"]),
                documents=_as_list(stream["documents"]),
                attributes=_as_list(stream.get("attributes") or []),
                include=[_compile(e, at) for e in _as_list(filt.get("include") or [])],
                exclude=[_compile(e, at) for e in _as_list(filt.get("exclude") or [])],
                span_replacement=[_replacement(r, at) for r in stream.get("span_replacement") or []],
                output_path=str(output["path"]).rstrip("/"),
                max_size_in_bytes=_int_setting(output, "max_size_in_bytes", DEFAULT_SHARD_BYTES, 1, at),
                discard_fields=_as_list(output.get("discard_fields") or []),
                min_text_length=_int_setting(output, "min_text_length", 0, 0, at),
                compression=compression,
            )
        )
    return streams


def _int_setting(output: dict[str, Any], key: str, default: int, minimum: int, at: str) -> int:
    """``output.<key>`` as an integer (JSON's ``1e9`` included); missing or null gives ``default``."""
    value = output.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int(f"{at}: output.{key}", value, minimum=minimum, error=CurateError)


def _output_compression(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("output") or "gz")
    return "gz"


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _compile(expression: str, at: str) -> JsonPath:
    try:
        return JsonPath(expression)
    except CurateError as exc:
        raise CurateError(f"{at}: {exc}") from None


def _replacement(raw: Any, at: str) -> SpanReplacement:
    if not isinstance(raw, dict) or "span" not in raw:
        raise CurateError(f"{at}: span_replacement entries need `span`")
    if "min_score" not in raw and "max_score" not in raw:
        raise CurateError(f"{at}: span_replacement {raw['span']!r} needs min_score or max_score")
    return SpanReplacement(
        span=_compile(raw["span"], at),
        replacement=str(raw.get("replacement", "")),
        min_score=float(raw["min_score"]) if "min_score" in raw else None,
        max_score=float(raw["max_score"]) if "max_score" in raw else None,
    )


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


class _ShardWriter:
    """Size-capped shards ``<path>/<name>-NNNN<ext>``, each committed atomically when full."""

    def __init__(self, stream: StreamConfig) -> None:
        self.stream = stream
        self.ext = _EXTENSIONS[stream.compression]
        self.shards: list[str] = []
        self.bytes_written = 0
        self.current: files.AtomicOutput | None = None
        self.since_check = 0
        self.uncompressed = 0
        self.ratio = 1.0  # compressed / uncompressed, refined by each measurement
        self.check_every = max(1, min(stream.max_size_in_bytes // 64, 1 << 18))

    def _open(self) -> files.AtomicOutput:
        path = f"{self.stream.output_path}/{self.stream.name}-{len(self.shards):04d}{self.ext}"
        self.shards.append(path)
        return files.AtomicOutput(path, self.stream.compression)

    def write(self, line: bytes) -> None:
        if self.current is None:
            self.current = self._open()
            self.uncompressed = 0
        self.current.write(line)
        self.uncompressed += len(line)
        self.since_check += len(line)
        if self.since_check >= self.check_every:
            self.since_check = 0
            # Estimate from the last measured ratio; measure exactly (a compressor flush) only
            # when the estimate gets close, so a shard costs a handful of flushes.
            if self.uncompressed * self.ratio >= 0.9 * self.stream.max_size_in_bytes:
                size = self.current.compressed_size()
                self.ratio = max(size / self.uncompressed, 1e-3)
                if size >= self.stream.max_size_in_bytes:
                    self._close()

    def _close(self) -> None:
        if self.current is not None:
            self.current.commit()
            self.bytes_written += os.path.getsize(self.current.path) if not is_url(self.current.path) else 0
            self.current = None

    def finish(self) -> None:
        self._close()
        if not is_url(self.stream.output_path):
            _remove_stale_shards(self.stream, self.shards)

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()


def _remove_stale_shards(stream: StreamConfig, produced: list[str]) -> None:
    """Shards a previous run left behind (more of them, or another compression) would otherwise
    be read as part of this mix."""
    folder = stream.output_path
    if not os.path.isdir(folder):
        return
    keep = {os.path.basename(p) for p in produced}
    pattern = re.compile(rf"^{re.escape(stream.name)}-\d{{4,}}\.jsonl(\.gz|\.zst)?$")
    for name in os.listdir(folder):
        if pattern.match(name) and name not in keep:
            os.unlink(os.path.join(folder, name))


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


def mix_stream(stream: StreamConfig, progress: Callable[[int], None] | None = None) -> StreamReport:
    """Mix one stream; returns counts and the shard paths; ``progress(n)`` gets document counts
    in batches while it runs."""
    started = time.monotonic()
    report = StreamReport(stream.name, min_text_length=stream.min_text_length)
    counts = [FilterCount("include", p.text) for p in stream.include] + [
        FilterCount("exclude", p.text) for p in stream.exclude]
    ticker = _Ticker(progress)
    writer = _ShardWriter(stream)
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


def _mix_stream_task(stream: StreamConfig, report: Callable[[int], None]) -> StreamReport:
    return mix_stream(stream, report)


def run_mix(streams: list[StreamConfig], processes: int = 1, show_progress: bool | None = None) -> MixReport:
    """Mix every stream (in parallel across streams when ``processes`` > 1), with a documents/s
    progress bar on a terminal (``show_progress`` forces it on or off).

    The first stream that fails stops the run: the streams still being mixed are dropped (their
    shards are temporary files until each is complete) and the error reaches the caller.
    """
    check_int("processes", processes, minimum=1, error=CurateError)
    started = time.monotonic()
    reports: list[StreamReport] = []
    # The documents have no total (counting them would cost a second pass); the streams do.
    with Progress("mix", unit="doc", counters={"streams": len(streams)}, scale=True,
                  enabled=show_progress) as progress:
        done = pool_map(_mix_stream_task, streams, processes=processes, progress=progress.update, ordered=True)
        with contextlib.closing(done):
            for report in done:
                reports.append(report)
                progress.count(streams=1)
    return MixReport(reports, time.monotonic() - started)
