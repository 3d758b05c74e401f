"""``feedline tokenize``: documents to datatrove's token layout, one task per input shard.

It runs on the run layer's machinery, as curate's tagging does: a task per file tried with
retries (:mod:`feedline.run.task`), the spawn pool (``--processes N``,
workers that die with their parent, a run that stops naming the shard whose worker died) or its
Ray driver (``--executor ray``), one :class:`~feedline.run.markers.DoneMarker` per shard in an
explicit metadata folder (default ``<out>/.feedline-tokenize``, so resume survives reboots), and
one progress bar whose rate is tokens/s. A rerun skips every shard whose marker is valid for the
same job; a run killed with ``kill -9`` leaves complete shards (with markers) and hidden temps,
which the rerun removes before it redoes the rest, ending with the files an uninterrupted run
makes. The manifest (:mod:`feedline.text.manifest`) is written last, once every shard is done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import random
import time
from dataclasses import dataclass, field
from typing import Any

from feedline.io.atomic import remove_stale_temps
from feedline.io.paths import is_url, local_path
from feedline.io.redact import redact_text
from feedline.run.outputs import output_path, refuse_inputs
from feedline.run.pool import pool_map
from feedline.run.progress import Progress
from feedline.run.ray_driver import ray_map, ray_session
from feedline.text.errors import TextError
from feedline.text.layout import LOSS_SUFFIX, TOKENS_SUFFIX, shard_files
from feedline.text.lossmask import LOSS_SPAN_MODES
from feedline.text.manifest import MANIFEST_NAME, ShardRecord, write_manifest
from feedline.text.shard import ShardResult, ShardTask, TokenizeJob, run_shard
from feedline.validate import check_int

__all__ = ["TokenizeReport", "plan_tasks", "run_tokenize"]

log = logging.getLogger("feedline.text")
MARKERS = ".feedline-tokenize"
_EXTENSIONS = (".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json.gz", ".json.zst", ".jsonl", ".json",
               ".gz", ".zst")


@dataclass
class TokenizeReport:
    """What a run did: shards tokenized now, shards already done, and the totals."""

    total: int
    out: str
    done_before: list[str] = field(default_factory=list)
    processed: list[ShardResult] = field(default_factory=list)
    documents: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        if not self.processed:
            return (f"all {self.total} shards already done ({self.documents:,} documents, "
                    f"{self.tokens:,} tokens in {self.out}); nothing to do")
        made = sum(r.tokens for r in self.processed)
        rate = made / self.seconds if self.seconds else 0.0
        return (f"tokenized {len(self.processed)} shards ({sum(r.documents for r in self.processed):,} "
                f"documents, {made:,} tokens, {rate:,.0f} tokens/s) in {self.seconds:.1f}s; "
                f"{len(self.done_before)} already done; {self.tokens:,} tokens in {self.out}")


def _stem(name: str) -> str:
    for ext in _EXTENSIONS:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def plan_tasks(sources: list[str], out: str, metadata: str) -> list[ShardTask]:
    """One task per source; outputs keep the sources' paths below their common folder (below
    ``documents/`` when there is one), so ``a/x.jsonl.gz`` becomes ``<out>/a/x.ds``."""
    from feedline.curate.documents import common_base, relative_name

    base = common_base(sources)
    names = [_stem(relative_name(src, base)) for src in sources]
    if len(set(names)) < len(names):
        names = [_stem(posixpath.relpath(src, base) if base else src.split("://", 1)[-1]) for src in sources]
    seen: dict[str, str] = {}
    tasks = []
    for src, stem in zip(sources, names, strict=True):
        if stem in seen:
            raise TextError(f"{redact_text(src)} and {redact_text(seen[stem])} would both write {stem}{TOKENS_SUFFIX}; rename one")
        seen[stem] = src
        name = stem + TOKENS_SUFFIX
        path = output_path(out, name, error=TextError)
        tasks.append(ShardTask(src, name, os.fspath(path), f"{metadata.rstrip('/')}/{name}.done"))
    return tasks


def _outputs(task: ShardTask, job: TokenizeJob) -> tuple[str, ...]:
    """The files a shard writes: its three, and its ``.ds.loss`` with a loss mask."""
    files = shard_files(task.tokens_path)
    if job.loss_field is None:
        return files
    return (*files, files[0][: -len(TOKENS_SUFFIX)] + LOSS_SUFFIX)


def _pool_task(args: tuple[ShardTask, TokenizeJob, int], report: Any) -> ShardResult:
    task, job, retries = args
    return run_shard(task, job, retries, report)


def _source_of(args: tuple[ShardTask, TokenizeJob, int]) -> str:
    return args[0].source


def _remove_partial(args: tuple[ShardTask, TokenizeJob, int]) -> None:
    """The temps a dead or terminated worker left beside the shard's files and marker."""
    task, job, _ = args
    for path in (*_outputs(task, job), task.marker):
        remove_stale_temps(path)


def _ray_task(task: ShardTask, job: TokenizeJob, retries: int) -> ShardResult:
    return run_shard(task, job, retries, None)


def _run_local(tasks: list[ShardTask], job: TokenizeJob, retries: int, processes: int,
               progress: Progress) -> ShardResult | None:
    items = [(task, job, retries) for task in tasks]
    done = pool_map(_pool_task, items, processes=processes, progress=lambda n: progress.update(n),
                    describe=_source_of, cleanup=_remove_partial)
    with contextlib.closing(done):  # leaving early terminates the workers at once
        for result in done:
            progress.count(shards=1, documents=result.documents)
            if not result.ok:
                return result
    return None


def _run_ray(tasks: list[ShardTask], job: TokenizeJob, retries: int, address: str | None,
             progress: Progress) -> ShardResult | None:
    def failed(index: int, exc: Exception) -> ShardResult:
        return ShardResult(tasks[index].source, False, name=tasks[index].name,
                           error=f"Ray task failed: {type(exc).__name__}: {exc}")

    with ray_session(address, shutdown=False, error=TextError) as ray:
        done = ray_map(ray, _ray_task, [(task, job, retries) for task in tasks], on_error=failed,
                       max_retries=max(retries, 1))
        with contextlib.closing(done):
            for _, result in done:
                progress.update(result.tokens, shards=1, documents=result.documents)
                if not result.ok:
                    return result
    return None


def run_tokenize(
    documents: list[str],
    job: TokenizeJob,
    out: str,
    *,
    metadata: str | None = None,
    processes: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    retries: int = 0,
    seed: int = 0,
) -> TokenizeReport:
    """Tokenize every document file matching ``documents`` into ``out``; resumable, see the module."""
    from feedline.curate.documents import CurateError, expand

    check_int("processes", processes, minimum=1, error=TextError)
    check_int("retries", retries, minimum=0, error=TextError)
    if job.loss_spans not in LOSS_SPAN_MODES:
        raise TextError(f"--loss-spans {job.loss_spans!r}: use train (the spans are trained on) or ignore")
    if executor not in ("local", "ray"):
        raise TextError(f"unknown executor {executor!r}: use local or ray")
    if is_url(out):
        raise TextError(f"--out {redact_text(out)}: tokenize writes to a local folder; upload it afterwards")
    out = local_path(out)
    started = time.monotonic()
    try:
        sources = expand(documents)
    except CurateError as exc:
        raise TextError(str(exc)) from None
    metadata = metadata or posixpath.join(out, MARKERS)
    tasks = plan_tasks(sources, out, metadata)
    refuse_inputs([(t.tokens_path, "choose another --out") for t in tasks], sources, error=TextError)
    report = TokenizeReport(total=len(tasks), out=out)
    records: dict[str, ShardRecord] = {}
    loss = job.loss_field is not None
    pending = []
    for task in tasks:
        marker = task.done_marker(job).read()
        if marker is not None and all(os.path.exists(p) for p in _outputs(task, job)):
            report.done_before.append(task.source)
            records[task.name] = ShardRecord(task.name, redact_text(task.source), int(marker["documents"]),
                                             int(marker["tokens"]), loss)
        else:
            pending.append(task)
    if pending:
        random.Random(seed).shuffle(pending)  # a steadier ETA; the outputs do not depend on it
        with Progress("tokenize", unit="tok", scale=True,
                      counters={"shards": len(tasks), "documents": None}) as progress:
            progress.count(shards=len(tasks) - len(pending))
            if executor == "ray":
                failed = _run_ray(pending, job, retries, ray_address, progress)
            else:
                failed = _run_local(pending, job, retries, processes, progress)
        if failed is not None:
            raise TextError(failed.describe())
        for task in pending:
            marker = task.done_marker(job).read()
            if marker is None:
                raise TextError(f"{task.source}: finished without its done marker {task.marker}")
            result = ShardResult(task.source, True, int(marker["documents"]), name=task.name,
                                 tokens=int(marker["tokens"]))
            report.processed.append(result)
            records[task.name] = ShardRecord(task.name, redact_text(task.source), result.documents, result.tokens,
                                             loss)
    ordered = [records[t.name] for t in tasks]
    report.documents = sum(r.documents for r in ordered)
    report.tokens = sum(r.tokens for r in ordered)
    write_manifest(posixpath.join(out, MANIFEST_NAME), job.tokenizer.record(), job.parameters(), ordered)
    report.seconds = time.monotonic() - started
    return report
