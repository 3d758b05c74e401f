"""``feedline dedup``: exact + near-duplicate removal over local JSONL shards (one global index).

Outputs in ``--out``: every input's kept documents as ``<relative path>.jsonl.zst`` (mirroring
the inputs' folders below their common parent), ``verdicts.jsonl`` (``{"id", "shard",
"verdict"}`` per document, in input order) and ``dedup.json`` (parameters, per-shard counts,
index memory, the verdict file's sha256). Each file is installed atomically; ``dedup.json`` is
written last, so its presence means the run finished.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

from feedline.dedup.errors import DedupError
from feedline.io import atomic_write
from feedline.io.globs import expand_paths
from feedline.io.jsonl import stream_jsonl
from feedline.io.paths import is_url

from .engine import DEFAULT_CHUNK, DedupConfig, Deduplicator, Verdict

SUMMARY_NAME = "dedup.json"
VERDICTS_NAME = "verdicts.jsonl"
_SUFFIXES = (".jsonl.zst", ".jsonl.gz", ".jsonl")
_LOG_EVERY_S = 10.0


def expand_inputs(patterns: list[str]) -> list[Path]:
    """Local shard files matched by the patterns (``**`` allowed), in pattern order, each once."""
    for pattern in patterns:
        if is_url(pattern):
            raise DedupError(
                f"{pattern}: feedline dedup reads local shards; fetch them first with feedline download"
            )
    files = expand_paths(patterns, folder_glob="**/*.jsonl*", error=DedupError)
    for name in files:
        if not name.endswith(_SUFFIXES):
            raise DedupError(f"{name}: not a .jsonl, .jsonl.gz or .jsonl.zst file")
    return [Path(name) for name in files]


def _strip_suffix(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _output_names(inputs: list[Path]) -> list[str]:
    """Relative output names that mirror the inputs below their common parent folder."""
    absolute = [p.absolute() for p in inputs]
    root = Path(os.path.commonpath([str(p.parent) for p in absolute]))
    return [_strip_suffix(p.relative_to(root).as_posix()) + ".jsonl.zst" for p in absolute]


def _documents(path: Path, skip_bad_lines: bool) -> Iterator[dict[str, Any]]:
    return iter(stream_jsonl(path, skip_bad_lines=skip_bad_lines))


class _Progress:
    """tqdm over input bytes on a TTY, a log line every few seconds otherwise."""

    def __init__(self, total_bytes: int) -> None:
        self.tty = sys.stderr.isatty()
        self.total = total_bytes
        self.done = 0
        self.docs = 0
        self._last_log = time.monotonic()
        self._bar = None
        if self.tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="dedup")

    def advance(self, nbytes: int, docs: int) -> None:
        self.done += nbytes
        self.docs += docs
        if self._bar is not None:
            self._bar.update(nbytes)
        elif time.monotonic() - self._last_log >= _LOG_EVERY_S:
            self._last_log = time.monotonic()
            pct = 100.0 * self.done / self.total if self.total else 100.0
            print(f"dedup: {self.docs} documents, {pct:.0f}% of input", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _ShardRun:
    """Feeds one shard's batches to the deduplicator; writes kept documents, counts verdicts."""

    def __init__(self, dedup: Deduplicator, writer: IO[bytes], name: str) -> None:
        self.dedup = dedup
        self.writer = writer
        self.name = name
        self.counts = {"documents": 0, "kept": 0, "exact_dup": 0, "near_dup": 0}

    def flush(self, batch: list[dict[str, Any]], ids: list[str], texts: list[str]) -> bytes:
        """Dedup one batch; returns its ``verdicts.jsonl`` lines."""
        if not batch:
            return b""
        verdicts: list[Verdict] = self.dedup.add_batch(ids, texts)
        lines = []
        for doc, doc_id, verdict in zip(batch, ids, verdicts, strict=True):
            self.counts[verdict.kind] += 1
            if verdict.kept:
                self.writer.write(orjson.dumps(doc) + b"\n")
            record = {"id": doc_id, "shard": self.name, "verdict": str(verdict)}
            lines.append(orjson.dumps(record) + b"\n")
        self.counts["documents"] += len(batch)
        return b"".join(lines)


def _doc_id(doc: dict[str, Any], shard: str, number: int) -> str:
    value = doc.get("id")
    return f"{shard}:{number}" if value is None else str(value)


def dedup_files(
    inputs: list[Path],
    out_dir: Path,
    config: DedupConfig,
    *,
    text_field: str = "text",
    skip_bad_lines: bool = False,
) -> dict[str, Any]:
    """Deduplicate ``inputs`` in order into ``out_dir``; returns the summary written to dedup.json."""
    names = _output_names(inputs)
    progress = _Progress(sum(p.stat().st_size for p in inputs))
    shards: list[dict[str, Any]] = []
    verdict_hash = hashlib.sha256()
    started = time.monotonic()
    cctx = zstandard.ZstdCompressor(level=3)
    try:
        with (
            Deduplicator(config, spill_dir=str(out_dir)) as dedup,
            atomic_write(out_dir / VERDICTS_NAME, "wb") as verdicts_file,
        ):
            for path, name in zip(inputs, names, strict=True):
                counts = {"documents": 0, "kept": 0, "exact_dup": 0, "near_dup": 0}
                with atomic_write(out_dir / name, "wb") as raw_out:
                    shard = _ShardRun(dedup, cctx.stream_writer(raw_out, closefd=False), name)
                    batch: list[dict[str, Any]] = []
                    ids: list[str] = []
                    texts: list[str] = []
                    for number, doc in enumerate(_documents(path, skip_bad_lines)):
                        text = doc.get(text_field)
                        if not isinstance(text, str):
                            raise DedupError(
                                f"{path}: document {number + 1} has no string field "
                                f"{text_field!r} (use --text-field)"
                            )
                        batch.append(doc)
                        ids.append(_doc_id(doc, name, number))
                        texts.append(text)
                        if len(batch) == DEFAULT_CHUNK:
                            blob = shard.flush(batch, ids, texts)
                            verdicts_file.write(blob)
                            verdict_hash.update(blob)
                            progress.advance(0, len(batch))
                            batch, ids, texts = [], [], []
                    blob = shard.flush(batch, ids, texts)
                    verdicts_file.write(blob)
                    verdict_hash.update(blob)
                    shard.writer.close()  # ends the zstd frame; raw_out stays open
                progress.advance(path.stat().st_size, len(batch))
                counts = shard.counts
                shards.append({"input": str(path), "output": name, **counts})
            index_bytes = dedup.index_nbytes
            indexed = dedup.lsh.index.rows
            parameters = config.to_dict()
    finally:
        progress.close()
    totals = {k: sum(s[k] for s in shards) for k in ("documents", "kept", "exact_dup", "near_dup")}
    summary = {
        "schema": 1,
        "parameters": parameters,
        "shards": shards,
        "totals": totals,
        "index_bytes": index_bytes,
        "indexed_documents": indexed,
        "verdicts": VERDICTS_NAME,
        "verdicts_sha256": verdict_hash.hexdigest(),
        "seconds": round(time.monotonic() - started, 3),
    }
    with atomic_write(out_dir / SUMMARY_NAME, "wb") as f:
        f.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return summary


def cmd_dedup(args: argparse.Namespace) -> int:
    config = DedupConfig.from_flags(
        threshold=args.threshold,
        num_perm=args.num_perm,
        ngram=args.ngram,
        bands=args.bands,
        rows=args.rows,
        seed=args.seed,
        verify=args.verify,
    )
    inputs = expand_inputs(args.inputs)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = dedup_files(
        inputs, out_dir, config, text_field=args.text_field, skip_bad_lines=args.skip_bad_lines
    )
    t = summary["totals"]
    p = summary["parameters"]
    print(
        f"dedup: {t['documents']} documents in {len(inputs)} shard(s): kept {t['kept']}, "
        f"exact duplicates {t['exact_dup']}, near duplicates {t['near_dup']} "
        f"(threshold {p['threshold']}, {p['bands']}x{p['rows']} bands, verify {p['verify']}) "
        f"-> {out_dir / SUMMARY_NAME}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``feedline dedup`` to the main CLI's subparsers."""
    parser = subparsers.add_parser(
        "dedup",
        help="remove exact and near duplicates from local JSONL shards",
        description=(
            "Read .jsonl/.jsonl.gz/.jsonl.zst shards in order (first occurrence wins across all "
            "of them), drop exact duplicates (normalised text) and near duplicates (MinHash + "
            "LSH, candidates confirmed by Jaccard), write kept documents as zstd JSONL, "
            "verdicts.jsonl and dedup.json into --out."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT_GLOB", help="shard files or globs")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard threshold (0.8)")
    parser.add_argument("--num-perm", type=int, default=128, help="MinHash permutations (128)")
    parser.add_argument("--ngram", type=int, default=5, help="word n-gram shingle size (5)")
    parser.add_argument("--bands", type=int, help="LSH bands (default: chosen from --threshold)")
    parser.add_argument("--rows", type=int, help="LSH rows per band (with --bands)")
    parser.add_argument("--seed", type=int, default=1, help="hash family seed (1)")
    parser.add_argument(
        "--verify",
        choices=("exact", "estimate"),
        default="exact",
        help="confirm candidates by exact shingle Jaccard (default) or the MinHash estimate",
    )
    parser.add_argument("--text-field", default="text", help="JSON field holding the text")
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed JSON lines instead of failing"
    )
    parser.set_defaults(func=cmd_dedup)
