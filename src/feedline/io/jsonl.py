"""``stream_jsonl``: documents from ``.jsonl``, ``.jsonl.gz`` and ``.jsonl.zst``, local or remote.

The shard is never materialised: :class:`feedline.io.lines.LineReader` decompresses it
incrementally and strictly (a truncated gzip/zstd stream is an error naming the file, never a
shorter valid shard), and each line is parsed with orjson, so memory is one read buffer, one
decompressed piece and the current document.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from feedline.io.errors import CorpusFormatError, IoError, StoreError
from feedline.io.lines import READ_BYTES, LineReader, open_input

#: The names of JSON-lines shards (any of them may be plain, gzip or zstd: the reader sniffs the
#: bytes), shared by ``feedline download`` and ``feedline dedup`` so both accept and name the same
#: files (``c4-train.00000-of-01024.json.gz`` is JSON lines too).
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json.gz", ".json.zst")


def is_jsonl(name: str) -> bool:
    """Whether ``name`` (a path or URL without its query) is a JSON-lines shard."""
    return name.lower().endswith(JSONL_SUFFIXES)


def jsonl_stem(name: str) -> str:
    """``name`` without its JSON-lines suffix (``a/b.json.gz`` -> ``a/b``)."""
    lower = name.lower()
    for suffix in sorted(JSONL_SUFFIXES, key=len, reverse=True):
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


def kept_shard_names(names: Sequence[str], error: type[Exception] = IoError) -> list[str]:
    """The ``.jsonl.zst`` name each input shard's kept documents are written under.

    ``download --dedup`` and ``feedline dedup`` share this rule so the same shards get the same
    names: the shard's name without its JSON-lines suffix (``c4-000.json.gz`` ->
    ``c4-000.jsonl.zst``), except where two inputs share that stem (``a.jsonl`` and
    ``a.jsonl.gz``), which keep their full names, since one output silently replacing another
    would lose documents. Names still equal after that are an ``error`` naming both inputs.
    """
    stems = [jsonl_stem(name) for name in names]
    shared = Counter(stems)
    out = [f"{stem if shared[stem] == 1 else name}.jsonl.zst" for stem, name in zip(stems, names, strict=True)]
    seen: dict[str, str] = {}
    for name, kept in zip(names, out, strict=True):
        if kept in seen:
            raise error(f"{seen[kept]} and {name} would both be written as {kept}: rename one of them")
        seen[kept] = name
    return out


class JsonlStream:
    """An iterable over the documents (dicts) of one JSONL shard; counts what it saw.

    ``lines`` counts physical lines read, ``documents`` the documents yielded, ``bad_lines`` the
    malformed lines skipped (only with ``skip_bad_lines``; otherwise the first one raises
    :class:`CorpusFormatError` naming the file and the 1-based line number).

    Args:
        path_or_url: a local path, ``file://`` URL or any URL ``feedline.io`` can open.
        skip_bad_lines: count and skip malformed lines instead of failing on the first.
        storage_options: passed to the store of a remote URL (credentials, endpoint).
        read_bytes: compressed bytes per read.
    """

    def __init__(
        self,
        path_or_url: str | Path,
        *,
        skip_bad_lines: bool = False,
        storage_options: dict[str, Any] | None = None,
        read_bytes: int = READ_BYTES,
    ) -> None:
        self.path = str(path_or_url)
        self.skip_bad_lines = skip_bad_lines
        self.storage_options = storage_options or {}
        self.read_bytes = read_bytes
        self.lines = 0
        self.documents = 0
        self.bad_lines = 0
        self.compressed_bytes = 0

    def _bad(self, line_no: int, why: str) -> None:
        if not self.skip_bad_lines:
            raise CorpusFormatError(
                f"{self.path}: line {line_no}: {why} (use --skip-bad-lines to skip such lines)"
            )
        self.bad_lines += 1

    def __iter__(self) -> Iterator[dict[str, Any]]:
        loads = orjson.loads
        try:
            handle = open_input(self.path, self.storage_options)
        except StoreError as exc:
            raise CorpusFormatError(str(exc)) from None
        reader = LineReader(handle, self.path, read_bytes=self.read_bytes)
        batches = reader.batches()
        try:
            line_no = self.lines
            while True:
                try:
                    pieces = next(batches, None)
                except StoreError as exc:
                    raise CorpusFormatError(f"{self.path}: read failed: {exc}") from None
                finally:
                    self.compressed_bytes = reader.compressed_bytes
                if pieces is None:
                    break
                for line in pieces:
                    line_no += 1
                    try:
                        doc = loads(line)
                    except orjson.JSONDecodeError as exc:
                        if not line.strip():
                            continue
                        self.lines = line_no
                        self._bad(line_no, f"invalid JSON ({exc})")
                        continue
                    if type(doc) is not dict:
                        self.lines = line_no
                        self._bad(line_no, f"expected a JSON object, got {type(doc).__name__}")
                        continue
                    self.lines = line_no
                    yield doc
                    self.documents += 1
                self.lines = line_no
        finally:
            handle.close()


def stream_jsonl(
    path_or_url: str | Path,
    *,
    skip_bad_lines: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> JsonlStream:
    """Documents of a ``.jsonl``/``.jsonl.gz``/``.jsonl.zst`` file or URL, one at a time.

    Args:
        path_or_url: a local path, ``file://`` URL or any URL ``feedline.io`` can open.
        skip_bad_lines: count and skip malformed lines instead of failing on the first.
        storage_options: passed to the store of a remote URL (credentials, endpoint).
    """
    return JsonlStream(path_or_url, skip_bad_lines=skip_bad_lines, storage_options=storage_options)
