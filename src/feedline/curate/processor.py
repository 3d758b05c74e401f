"""The resumable parallel processor: one task per input file, ``.done`` markers, retries.

A file counts as done only when its marker exists *and* records a digest of the same job
(taggers, experiment, destination, options, corpus); markers live in an explicit metadata folder (default: under the
attributes root, never a temporary folder). Only :class:`RetryableFailure` is retried; any
other error aborts the run, or with ``skip_on_failure`` skips the file and is reported at the
end. When every file is already done the run is a no-op that says so.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import random
import tempfile
import time
from dataclasses import dataclass, field

from feedline.curate import files
from feedline.curate.documents import common_base, relative_name
from feedline.curate.errors import CurateError
from feedline.curate.executors import EXECUTORS
from feedline.curate.runtime import TagJob, attributes_root, check_options
from feedline.curate.task import MARKER_SUFFIX, Task, TaskResult, done_marker
from feedline.io.paths import is_url
from feedline.run.markers import params_digest
from feedline.validate import check_int

log = logging.getLogger("feedline.curate")


@dataclass
class RunReport:
    """What a run did: files tagged now, files already done, files that failed (skipped)."""

    total: int
    done_before: list[str] = field(default_factory=list)
    processed: list[TaskResult] = field(default_factory=list)
    failed: list[TaskResult] = field(default_factory=list)
    metadata: str = ""
    seconds: float = 0.0

    @property
    def documents(self) -> int:
        return sum(r.documents for r in self.processed)

    def summary(self) -> str:
        if not self.processed and not self.failed:
            return f"all {self.total} files already done (markers in {self.metadata}); nothing to do"
        text = (
            f"tagged {len(self.processed)} files ({self.documents:,} documents) in {self.seconds:.1f}s; "
            f"{len(self.done_before)} already done"
        )
        if self.failed:
            text += f"; {len(self.failed)} FAILED and skipped: " + "; ".join(r.describe() for r in self.failed)
        return text


def default_metadata_dir(sources: list[str], job: TagJob) -> str:
    """``<attributes root>/.feedline-tag/<experiment or tagger names>``: resume survives reboots."""
    key = job.experiment or "+".join(job.taggers)
    return f"{attributes_root(sources[0], job.destination)}/.feedline-tag/{key}"


def is_temporary(path: str) -> bool:
    if is_url(path):
        return False
    return os.path.abspath(path).startswith(os.path.abspath(tempfile.gettempdir()) + os.sep)


def plan_tasks(sources: list[str], metadata: str) -> list[Task]:
    base = common_base(sources)
    names = [relative_name(src, base) for src in sources]
    if len(set(names)) < len(names):  # same name below two documents/ folders: keep them apart
        names = [posixpath.relpath(src, base) if base else src.split("://", 1)[-1] for src in sources]
    return [Task(src, f"{metadata.rstrip('/')}/{name}{MARKER_SUFFIX}", base) for src, name in zip(sources, names,
                                                                                             strict=True)]


def check_job(job: TagJob) -> None:
    """Unknown taggers or options, a missing model or binding: said before any file is read."""
    from feedline.curate.registry import get_tagger, import_tagger_modules

    import_tagger_modules(job.tagger_modules)
    for name in job.taggers:
        cls = get_tagger(name)
        options = job.options_of(name)
        check_options(cls, options)
        cls.preflight(options)


def run_tag(
    documents: list[str],
    job: TagJob,
    *,
    metadata: str | None = None,
    processes: int = 1,
    retries: int = 0,
    skip_on_failure: bool = False,
    executor: str = "local",
    ray_address: str | None = None,
    ignore_done: bool = False,
    seed: int = 0,
) -> RunReport:
    """Tag every file matching ``documents`` (globs) with ``job``; resumable; see module doc."""
    from feedline.curate.registry import get_tagger

    check_int("processes", processes, minimum=1, error=CurateError)
    check_int("retries", retries, minimum=0, error=CurateError)
    check_job(job)
    started = time.monotonic()
    sources = files.expand(documents)
    if metadata and is_temporary(metadata):
        log.warning("markers go to a temporary folder (%s): resume is lost once it is cleaned up", metadata)
    metadata = metadata or default_metadata_dir(sources, job)
    tasks = plan_tasks(sources, metadata)
    report = RunReport(total=len(tasks), metadata=metadata)
    corpus_taggers = [get_tagger(n) for n in job.taggers if get_tagger(n).needs_corpus_pass]
    if corpus_taggers:
        listing = [[s, files.size_of(s)] for s in sources]
        job = dataclasses.replace(job, corpus_digest=params_digest(listing))
    pending = []
    for task in tasks:
        if not ignore_done and done_marker(task, job).read() is not None:
            report.done_before.append(task.source)
        else:
            pending.append(task)
    if not pending:
        log.info(report.summary())
        return report
    job = dataclasses.replace(job, workdir=metadata)
    for tagger_class in corpus_taggers:
        log.info("%s: corpus pass over %d files", tagger_class.name, len(sources))
        tagger_class.prepare_corpus(sources, metadata)
    random.Random(seed).shuffle(pending)  # spreads big files out for a steadier ETA; output order is unaffected
    run_executor = EXECUTORS.get(executor)
    if run_executor is None:
        raise CurateError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    results = run_executor(pending, job, retries, skip_on_failure, processes=processes,
                           ray_address=ray_address)
    for result in results:
        (report.processed if result.ok else report.failed).append(result)
    report.seconds = time.monotonic() - started
    if report.failed and not skip_on_failure:
        first = report.failed[0]
        raise CurateError(f"{first.describe()} (use --skip-on-failure to skip failing files)")
    return report
