"""``feedline dedup``: exact + near-duplicate removal over JSONL shards (one global index).

Two executors give the same verdicts and bytes: ``local`` (default) streams local shards through
one :class:`~feedline.dedup.engine.Deduplicator` in this process; ``ray`` runs the staged form
(:mod:`feedline.dedup.ray_executor`) on a Ray cluster, reads local paths or URLs, and resumes.

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
import posixpath
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from feedline.dedup.errors import DedupError
from feedline.io import atomic_write
from feedline.io.globs import expand_paths
from feedline.io.jsonl import JSONL_SUFFIXES, is_jsonl, kept_shard_names
from feedline.io.paths import is_url, local_path
from feedline.run.outputs import InstallSet
from feedline.run.progress import Progress
from feedline.validate import check_int

from .engine import DEFAULT_THRESHOLD, DedupConfig, Deduplicator
from .minhash import DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_SEED
from .shards import SUMMARY_NAME, VERDICTS_NAME, ShardDocuments, check_outputs, dedup_shard


def expand_sources(
    patterns: list[str], *, urls: bool = False, include: list[str] | None = None,
    exclude: list[str] | None = None,
) -> list[str]:
    """Shard files (or URLs, when ``urls``) matched by the patterns, in pattern order, each once;
    what a glob or folder lists is filtered by ``include``/``exclude`` as ``feedline download``
    filters it (:func:`feedline.io.globs.expand_paths`)."""
    for pattern in patterns:
        if is_url(pattern) and not urls:
            raise DedupError(
                f"{pattern}: the local executor reads local shards; use --executor ray, "
                "or fetch them first with feedline download"
            )
    files = expand_paths(patterns, folder_glob="**/*.jsonl*", error=DedupError,
                         include=include or (), exclude=exclude or ())
    for name in files:
        if not is_jsonl(name.split("?", 1)[0]):
            raise DedupError(f"{name}: not a JSON-lines shard ({', '.join(JSONL_SUFFIXES)})")
    return files


def expand_inputs(
    patterns: list[str], include: list[str] | None = None, exclude: list[str] | None = None
) -> list[Path]:
    """Local shard files matched by the patterns (``**`` allowed), in pattern order, each once."""
    return [Path(name) for name in expand_sources(patterns, include=include, exclude=exclude)]


def _output_names(inputs: list[Path] | list[str]) -> list[str]:
    """Relative output names that mirror the inputs below their common parent folder (for a URL,
    its host and path stand for the folder).

    The paths are normalised first (``sub/../../corpus/a.jsonl`` is ``corpus/a.jsonl`` of the
    folder two up), so the common parent really contains every input and no name starts with
    ``..``; one that still would is refused rather than written outside ``--out``."""
    keys = [_name_key(str(p)) for p in inputs]
    root = posixpath.commonpath([posixpath.dirname(k) for k in keys])
    names = [posixpath.relpath(k, root) for k in keys]
    for source, name in zip(inputs, names, strict=True):
        if ".." in name.split("/"):
            raise DedupError(f"{source}: cannot name its output below --out ({name}); give the inputs without '..'")
    return kept_shard_names(names, error=DedupError)


def _name_key(source: str) -> str:
    if is_url(source):
        parts = urlsplit(source)
        return posixpath.normpath("/" + parts.netloc.rsplit("@", 1)[-1] + parts.path)
    return Path(os.path.abspath(local_path(source))).as_posix()


def dedup_files(
    inputs: list[Path],
    out_dir: Path,
    config: DedupConfig,
    *,
    text_field: str = "text",
    skip_bad_lines: bool = False,
) -> dict[str, Any]:
    """Deduplicate ``inputs`` in order into ``out_dir``; returns the summary written to dedup.json.

    All or nothing: the kept shards and ``verdicts.jsonl`` wait in their temps until the last
    shard is done, so a run failing on any shard (a bad document, a truncated file) leaves none
    of them, and ``dedup.json`` is installed after them."""
    names = _output_names(inputs)
    kept_paths = check_outputs([str(p) for p in inputs], names, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress("dedup", total=sum(p.stat().st_size for p in inputs), unit="B",
                        counters={"documents": None})
    shards: list[dict[str, Any]] = []
    verdict_hash = hashlib.sha256()
    started = time.monotonic()
    try:
        with InstallSet() as installs, Deduplicator(config, spill_dir=str(out_dir)) as dedup:
            verdicts_file = installs.add(out_dir / VERDICTS_NAME).handle

            def write_verdicts(blob: bytes) -> None:
                verdicts_file.write(blob)
                verdict_hash.update(blob)

            for path, name, kept_path in zip(inputs, names, kept_paths, strict=True):
                documents = ShardDocuments(path, text_field=text_field, skip_bad_lines=skip_bad_lines)
                counts = dedup_shard(dedup, documents, name, kept_path, write_verdicts,
                                     progress=lambda n: progress.count(documents=n), installs=installs)
                progress.update(path.stat().st_size)
                row = counts.to_dict()
                del row["bad_lines"]  # dedup.json's shard rows have never carried them
                shards.append({"input": str(path), "output": name, **row})
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


#: The similarity flags, declared once for ``feedline dedup`` and ``feedline download --dedup``.
SIMILARITY_FLAGS = ("threshold", "num_perm", "ngram", "bands", "rows")


def add_similarity_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What decides near duplicates, with one spelling, default and help in both commands."""
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"Jaccard threshold (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--num-perm", type=int, default=DEFAULT_NUM_PERM,
                        help=f"MinHash signature slots (default {DEFAULT_NUM_PERM})")
    parser.add_argument("--ngram", type=int, default=DEFAULT_NGRAM,
                        help=f"word n-gram shingle size (default {DEFAULT_NGRAM})")
    parser.add_argument("--bands", type=int, help="LSH bands (default: chosen from --threshold)")
    parser.add_argument("--rows", type=int, help="LSH rows per band (with --bands)")


def similarity_values(args: argparse.Namespace) -> dict[str, Any]:
    """The similarity flags' values, as :meth:`DedupConfig.from_flags` takes them."""
    return {name: getattr(args, name) for name in SIMILARITY_FLAGS}


def cmd_dedup(args: argparse.Namespace) -> int:
    config = DedupConfig.from_flags(**similarity_values(args), seed=args.seed, verify=args.verify)
    ray = args.executor == "ray"
    if not ray:
        for flag, value in (("--ray-address", args.ray_address), ("--work-dir", args.work_dir),
                            ("--workers", args.workers), ("--partitions", args.partitions)):
            if value is not None:
                raise DedupError(f"{flag} applies only with --executor ray")
    for flag, value in (("--workers", args.workers), ("--partitions", args.partitions)):
        if value is not None:
            check_int(flag, value, minimum=1, error=DedupError)
    out_dir = Path(args.out)
    if ray:
        from feedline.run.ray_driver import import_ray

        from .ray_executor import run_ray_dedup

        import_ray(DedupError)  # before anything is read or written: without Ray, one line and no output
        sources = expand_sources(args.inputs, urls=True, include=args.include, exclude=args.exclude)
        summary = run_ray_dedup(
            sources, _output_names(sources), out_dir, config, text_field=args.text_field,
            skip_bad_lines=args.skip_bad_lines, workers=args.workers, ray_address=args.ray_address,
            work_dir=Path(args.work_dir) if args.work_dir else None, partitions=args.partitions,
        )
    else:
        inputs = expand_inputs(args.inputs, args.include, args.exclude)
        sources = [str(p) for p in inputs]
        summary = dedup_files(
            inputs, out_dir, config, text_field=args.text_field, skip_bad_lines=args.skip_bad_lines
        )
    t = summary["totals"]
    p = summary["parameters"]
    extra = ""
    if ray:
        stage_counts = summary["executor"]["stages"]
        reused = sum(s["reused"] for s in stage_counts.values())
        total = sum(s["tasks"] for s in stage_counts.values())
        extra = f", ray: {total - reused} task(s) run, {reused} reused"
    print(
        f"dedup: {t['documents']} documents in {len(sources)} shard(s): kept {t['kept']}, "
        f"exact duplicates {t['exact_dup']}, near duplicates {t['near_dup']} "
        f"(threshold {p['threshold']}, {p['bands']}x{p['rows']} bands, verify {p['verify']}) "
        f"in {summary['seconds']:.1f} s{extra} -> {out_dir / SUMMARY_NAME}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``feedline dedup`` to the main CLI's subparsers."""
    parser = subparsers.add_parser(
        "dedup",
        help="remove exact and near duplicates from JSONL shards",
        description=(
            "Read JSON-lines shards (.jsonl, .json.gz, .jsonl.zst ...) in order (first occurrence wins across all "
            "of them), drop exact duplicates (normalised text) and near duplicates (MinHash + "
            "LSH, candidates confirmed by Jaccard), write kept documents as zstd JSONL, "
            "verdicts.jsonl and dedup.json into --out."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT_GLOB", help="shard files or globs")
    parser.add_argument("--include", action="append", metavar="PATTERN",
                        help="keep only listed shards whose path below the glob's fixed part "
                             "matches (fnmatch, as feedline download); repeatable")
    parser.add_argument("--exclude", action="append", metavar="PATTERN",
                        help="leave out listed shards matching (wins over --include); repeatable")
    parser.add_argument("--out", required=True, help="output folder")
    add_similarity_arguments(parser)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"hash family seed (default {DEFAULT_SEED})")
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
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: one process, one index (default); ray: staged tasks on a Ray cluster, "
        "resumable, inputs may be URLs (see docs/dedup.md)",
    )
    parser.add_argument("--workers", type=int, help="CPUs of the local Ray started by --executor ray")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: start a local one)")
    parser.add_argument("--work-dir", help="intermediate arrays and markers (default: OUT/.dedup-work)")
    parser.add_argument(
        "--partitions", type=int, help="band-key partitions (default: 4 per CPU, or the work dir's)"
    )
    parser.set_defaults(func=cmd_dedup)
