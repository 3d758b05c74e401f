"""A download run: shards in parallel (bounded), then counting / dedup, then the manifest, last.

Downloads are pure I/O, so a thread per shard (up to ``workers``) keeps the link busy; one
progress bar over bytes shows all of them (:class:`feedline.run.progress.Progress`: periodic
log lines instead when stderr is not a terminal, e.g. in a batch job). Counting documents is
CPU-bound decoding, so it runs one process per shard. Dedup is one ordered pass (first
occurrence wins, so verdicts depend only on the order of the URLs given, never on which download
finished first), each shard through :func:`feedline.dedup.shards.dedup_shard`, the loop
``feedline dedup`` runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from feedline.acquire.download import (
    DEFAULT_CHECKPOINT_BYTES,
    ShardResult,
    download_shard,
    reusable_bytes,
)
from feedline.acquire.errors import AcquireError, DownloadError
from feedline.acquire.manifest import (
    VERDICTS_NAME,
    ShardEntry,
    VerdictWriter,
    emit_manifest,
    verdict_writer,
)
from feedline.acquire.sources import FolderStores
from feedline.errors import FeedlineError
from feedline.io.errors import CorpusFormatError
from feedline.io.jsonl import is_jsonl, kept_shard_names, stream_jsonl
from feedline.io.redact import redact_text
from feedline.run.outputs import InstallSet, output_path, refuse_inputs
from feedline.run.pool import pool_map
from feedline.run.progress import Progress, human_bytes
from feedline.validate import check_int

log = logging.getLogger(__name__)

PROCESS_POOL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than decoding
STAT_THREADS = 16  # HEADs in flight at once while sizing the shards (each is one round trip)
#: Where ``--dedup`` writes kept documents, beside the manifest: the folder ``feedline dedup
#: --out`` would be, with the same file names.
DEDUP_FOLDER = "dedup"


@dataclass
class RunConfig:
    """What ``feedline download`` was asked to do."""

    urls: list[str]
    out_dir: Path
    manifest_path: Path | None = None
    dedup: Any = None  # a feedline.dedup.engine.DedupConfig, or None for no dedup
    workers: int = 4
    expected_sha256: dict[str, str] = field(default_factory=dict)  # url or file name -> hex
    skip_bad_lines: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)
    checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES
    progress: bool | None = None  # None: a bar when stderr is a terminal
    fsync: bool = True
    sizes: dict[str, int] = field(default_factory=dict)  # url -> size, when a listing told it

    def __post_init__(self) -> None:
        check_int("workers", self.workers, minimum=1, error=DownloadError)
        check_int("checkpoint_bytes", self.checkpoint_bytes, minimum=1, error=DownloadError)

    @property
    def manifest(self) -> Path:
        return self.manifest_path or self.out_dir / "manifest.json"


class _Stopped(DownloadError):
    """Raised inside a download thread when the run is interrupted."""


def shard_name(url: str) -> str:
    """The local file name for a shard URL: its last path segment."""
    path = urlsplit(url).path if "://" in url else url
    name = unquote(path.rpartition("/")[2])
    if not name or name in (".", "..") or "\x00" in name or "/" in name:
        raise DownloadError(
            f"{redact_text(url)}: cannot name a local file after this URL; "
            "give a URL ending in a file name"
        )
    return name


def shard_sizes(
    urls: Sequence[str], config: RunConfig, stores: FolderStores | None = None
) -> dict[str, int | None]:
    """Each shard's size for the progress total: from the listing when the URL came from a glob
    (``config.sizes``), else one HEAD (a stat for S3 and files), a few at once, on the run's
    ``stores`` (one per folder, so the requests share connections; opened here and closed again
    when not given). ``None`` where the question failed: the download itself then reports the
    error (a presigned GET URL, for one, may refuse HEAD)."""
    sizes: dict[str, int | None] = {url: config.sizes.get(url) for url in urls}
    todo = [url for url in urls if sizes[url] is None]
    if not todo:
        return sizes

    def size(url: str) -> int | None:
        try:
            return run_stores.source(url).stat().size
        except FeedlineError as exc:
            log.debug("%s: size unknown (%s)", redact_text(url), redact_text(str(exc)))
            return None

    with contextlib.ExitStack() as cleanup:
        run_stores = stores or cleanup.enter_context(FolderStores(config.storage_options))
        with ThreadPoolExecutor(
            max_workers=min(len(todo), max(config.workers, STAT_THREADS)), thread_name_prefix="feedline-head"
        ) as pool:
            for url, found in zip(todo, pool.map(size, todo), strict=True):
                sizes[url] = found
    return sizes


def download_all(config: RunConfig) -> list[ShardResult]:
    """Download every shard (at most ``workers`` at once); fail after all others have finished."""
    results, failures = download_each(config)
    if failures:
        raise _failed_error(failures, len(results) + len(failures))
    return results


def _failed_error(failures: list[tuple[str, str]], shards: int) -> DownloadError:
    for _, message in failures[1:]:
        log.error("%s", message)
    return DownloadError(f"{len(failures)} of {shards} shards failed; first: {failures[0][1]}")


def download_each(config: RunConfig) -> tuple[list[ShardResult], list[tuple[str, str]]]:
    """Download every shard; the results of those that finished and ``(url, error)`` of the rest."""
    names = [shard_name(url) for url in config.urls]
    seen: dict[str, str] = {}
    for url, name in zip(config.urls, names, strict=True):
        if name in seen and seen[name] != url:
            raise DownloadError(
                f"{redact_text(seen[name])} and {redact_text(url)} would both be saved as {name}; "
                "download them to different --out folders"
            )
        seen[name] = url
    unique = list(dict.fromkeys(config.urls))
    config.out_dir.mkdir(parents=True, exist_ok=True)
    with FolderStores(config.storage_options) as stores:  # one per folder for the whole run
        return _download_each(config, unique, stores)


def _download_each(
    config: RunConfig, unique: list[str], stores: FolderStores
) -> tuple[list[ShardResult], list[tuple[str, str]]]:
    """:func:`download_each` on the run's stores: sizes, then the shards in parallel."""
    sizes = shard_sizes(unique, config, stores)
    kept = {url: reusable_bytes(config.out_dir / shard_name(url), sizes[url]) for url in unique}
    unknown = sum(size is None for size in sizes.values())
    if unknown:
        log.info("download: size of %d of %d shards unknown; the total grows as they finish", unknown, len(unique))
    progress = Progress(
        "download",
        total=sum(size or 0 for size in sizes.values()),
        unit="B",
        initial=sum(kept.values()),
        enabled=config.progress,
    )

    def one(url: str) -> ShardResult:
        name = shard_name(url)
        expected = config.expected_sha256.get(url) or config.expected_sha256.get(name)
        result = download_shard(
            url,
            config.out_dir / name,
            source=stores.source(url),
            expected_sha256=expected,
            checkpoint_bytes=config.checkpoint_bytes,
            on_bytes=tick,
            fsync=config.fsync,
            on_reused=lambda n: progress.adjust(n - kept[url]),  # the estimate, now verified
            on_discard=lambda n: progress.adjust(-n),
        )
        if sizes[url] is None:
            progress.add_total(result.size)
        return result

    stop = threading.Event()

    def tick(n: int) -> None:
        if stop.is_set():  # Ctrl-C: stop at the next buffer; the checkpoint keeps the progress
            raise _Stopped("interrupted")
        progress.update(n)

    results: dict[str, ShardResult] = {}
    failures: list[tuple[str, str]] = []
    try:
        with ThreadPoolExecutor(
            max_workers=max(1, config.workers), thread_name_prefix="feedline-dl"
        ) as pool:
            futures = {url: pool.submit(one, url) for url in unique}
            try:
                for url, future in futures.items():
                    try:
                        results[url] = future.result()
                    except FeedlineError as exc:
                        failures.append((url, str(exc)))
            except BaseException:
                stop.set()
                for future in futures.values():
                    future.cancel()
                raise
    finally:
        progress.close()
    return [results[url] for url in unique if url in results], failures


def count_documents(path: str, skip_bad_lines: bool) -> tuple[int, int]:
    """(documents, bad lines) of one local shard; runs in a worker process."""
    stream = stream_jsonl(path, skip_bad_lines=skip_bad_lines)
    for _ in stream:
        pass
    return stream.documents, stream.bad_lines


def _count_one(item: tuple[str, bool], _report: object) -> tuple[int, int]:
    return count_documents(*item)


def _count_all(paths: list[str], config: RunConfig) -> list[tuple[int, int]]:
    """Every shard's counts, on the run layer's spawn pool when the corpus is large enough to pay
    for it (workers die with the run; a dead worker is reported naming its shard)."""
    small = sum(os.path.getsize(p) for p in paths) < PROCESS_POOL_MIN_BYTES
    processes = 1 if small else min(config.workers, len(paths))
    items = [(p, config.skip_bad_lines) for p in paths]
    return list(pool_map(_count_one, items, processes=processes, ordered=True,
                         describe=lambda item: item[0]))


def _missing_text(source: str, line: int, _number: int, _field: str) -> Exception:
    return CorpusFormatError(f'{source}: line {line}: document has no "text" string')


def kept_paths(corpus: list[tuple[ShardResult, ShardEntry]], folder: Path) -> list[Path]:
    """``<folder>/<shard name without its JSONL suffix>.jsonl.zst`` per shard: the names
    ``feedline dedup`` gives the same shards (``c4-000.json.gz`` -> ``c4-000.jsonl.zst``; see
    :func:`~feedline.io.jsonl.kept_shard_names` for shards that share a stem)."""
    return [folder / name for name in kept_shard_names([r.path.name for r, _ in corpus], error=AcquireError)]


def check_outputs(config: RunConfig) -> None:
    """Before any byte moves: the manifest and, with ``--dedup``, ``verdicts.jsonl`` and the kept
    shards are none of the shards this run downloads (each would replace the shard it was made
    from, e.g. ``--out X/dedup --manifest X/manifest.json`` puts kept ``a.jsonl.zst`` on the
    downloaded one); a one-line error naming both, nothing downloaded."""
    names = list(dict.fromkeys(shard_name(url) for url in config.urls))
    outputs = [(config.manifest, "choose another --manifest")]
    if config.dedup is not None:
        folder = config.manifest.absolute().parent
        outputs.append((folder / VERDICTS_NAME, "choose another --manifest"))
        kept = kept_shard_names([name for name in names if is_jsonl(name)], error=AcquireError)
        outputs += [(output_path(folder / DEDUP_FOLDER, name, error=AcquireError, flag="dedup folder"),
                     "choose another --out or --manifest") for name in kept]
    refuse_inputs(outputs, [config.out_dir / name for name in names], error=AcquireError)


def summary_line(manifest: dict[str, Any], seconds: float) -> str:
    """What a run did, in one line: shards, bytes fetched vs reused, documents and dedup counts."""
    shards = manifest["shards"]
    fetched = sum(s.get("fetched_bytes", 0) for s in shards)
    reused = sum(s.get("reused_bytes", 0) for s in shards)
    total = sum(s["bytes"] for s in shards)
    line = (
        f"download: {len(shards)} shard{'s' if len(shards) != 1 else ''}, {human_bytes(total)} "
        f"(fetched {human_bytes(fetched)}, reused {human_bytes(reused)})"
    )
    counted = [s for s in shards if s.get("documents") is not None]
    if counted:
        line += f"; {sum(s['documents'] for s in counted)} documents"
        if any(s.get("kept") is not None for s in counted):
            line += (
                f": kept {sum(s['kept'] or 0 for s in counted)}, "
                f"exact duplicates {sum(s['exact_dup'] or 0 for s in counted)}, "
                f"near duplicates {sum(s['near_dup'] or 0 for s in counted)}"
            )
        bad = sum(s.get("bad_lines") or 0 for s in counted)
        if bad:
            line += f" ({bad} bad lines skipped)"
    return f"{line}; {seconds:.1f} s"


def run(config: RunConfig) -> Path:
    """Download, count or dedup, and write the manifest last; returns the manifest's path."""
    started = time.time()
    check_outputs(config)
    results, failures = download_each(config)
    entries = [
        ShardEntry(
            url=r.url,
            path=str(r.path),
            sha256=r.sha256,
            bytes=r.size,
            etag=r.etag,
            last_modified=r.last_modified,
            reused_bytes=r.reused_bytes,
            fetched_bytes=r.fetched_bytes,
            restarts=r.restarts,
            resume=r.resume,
        )
        for r in results
    ]
    corpus = [(r, e) for r, e in zip(results, entries, strict=True) if is_jsonl(r.path.name)]
    parameters: dict[str, Any] = {
        "workers": config.workers,
        "skip_bad_lines": config.skip_bad_lines,
        "checkpoint_bytes": config.checkpoint_bytes,
        "fsync": config.fsync,
        "dedup": None,
    }
    if failures:
        # The shards that did finish are on disk, verified: record them (no counts or dedup,
        # which need the whole corpus) and the failures, then fail. A rerun resumes the rest
        # and replaces this manifest with the complete one.
        # With none finished there is nothing to record: no manifest, as before.
        failed = [{"url": redact_text(url), "error": redact_text(message)} for url, message in failures]
        if entries:
            emit_manifest(config.manifest, entries, parameters=parameters, started_at=started, failed=failed)
        raise _failed_error(failures, len(results) + len(failures))
    verdicts: VerdictWriter | None = None
    if config.dedup is not None and corpus:
        from feedline.dedup.engine import Deduplicator
        from feedline.dedup.shards import ShardDocuments, dedup_shard

        parameters["dedup"] = config.dedup.to_dict()
        kept_dir = config.manifest.absolute().parent
        dedup_dir = kept_dir / DEDUP_FOLDER
        docs_progress = Progress("dedup", unit="docs", enabled=config.progress)
        try:
            # kept shards are installed together once every shard is done: a failing shard
            # leaves none of them (and no verdicts or manifest)
            with (InstallSet() as installs, verdict_writer(kept_dir) as writer,
                  Deduplicator(config.dedup) as dedup):
                for (result, entry), kept_path in zip(
                    corpus, kept_paths(corpus, dedup_dir), strict=True
                ):
                    # Verdicts keep the downloaded name as their shard; ids of id-less documents
                    # use the kept shard's name, as feedline dedup names them.
                    documents = ShardDocuments(result.path, skip_bad_lines=config.skip_bad_lines,
                                               missing_text=_missing_text)
                    counts = dedup_shard(dedup, documents, kept_path.name, kept_path, writer.write_lines,
                                         label=result.path.name, progress=docs_progress.update,
                                         installs=installs)
                    entry.documents, entry.bad_lines = counts.documents, counts.bad_lines
                    entry.kept, entry.exact_dup, entry.near_dup = counts.kept, counts.exact_dup, counts.near_dup
                    entry.kept_path = str(kept_path)
                parameters["dedup"]["index_bytes"] = dedup.index_nbytes
            verdicts = writer
        finally:
            docs_progress.close()
    elif corpus:
        counted = _count_all([str(r.path) for r, _ in corpus], config)
        for (_, entry), (documents, bad) in zip(corpus, counted, strict=True):
            entry.documents, entry.bad_lines = documents, bad
    return emit_manifest(
        config.manifest, entries, parameters=parameters, verdicts=verdicts, started_at=started
    )


def run_urls(urls: Sequence[str], out_dir: str | Path, **options: Any) -> Path:
    """Convenience wrapper: ``run(RunConfig(list(urls), Path(out_dir), **options))``."""
    return run(RunConfig(list(urls), Path(out_dir), **options))
