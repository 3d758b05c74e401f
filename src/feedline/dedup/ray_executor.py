"""``feedline dedup --executor ray``: the stages of :mod:`feedline.dedup.stages` as Ray tasks.

Why Ray: it already schedules feedline's tagging over a cluster, retries tasks whose worker died,
and moves nothing big between processes here (tasks exchange file names; arrays stay in the work
dir, which must be a path every node sees). The driver only decides which tasks still lack a
done marker, submits them, shows a bar per stage and writes the final ``verdicts.jsonl`` and
``dedup.json``, in the same format as the one-process engine.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from feedline.dedup.errors import DedupError
from feedline.errors import FeedlineError
from feedline.io import atomic_write, process_lock
from feedline.io.atomic import install
from feedline.io.paths import is_url, local_path
from feedline.run.progress import Progress
from feedline.run.ray_driver import import_ray, ray_map, ray_session

from . import stages
from .engine import DedupConfig
from .minhash import SIGNATURE_SCHEME
from .shards import DOC_IDS, KINDS, check_outputs
from .workdir import WorkDir

WORK_DIR_NAME = ".dedup-work"
STAGES = ("signatures", "buckets", "cluster", "resolve", "write")
_PARTITIONS_PER_CPU = 4


def input_identity(source: str) -> dict[str, Any]:
    """Size and a change stamp of one input, recorded in the work dir's parameters."""
    if not is_url(source):
        st = os.stat(local_path(source))
        return {"input": source, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    from feedline.io import open_object

    store, name = open_object(source)
    try:
        info = store.stat(name)
    finally:
        store.close()
    return {"input": source, "size": info.size, "etag": info.etag or info.fingerprint}


class _Stage:
    """Runs one stage's pending tasks on Ray with a bar; counts run and reused tasks."""

    def __init__(self, ray: Any, work: WorkDir, name: str, tty: bool) -> None:
        self.ray = ray
        self.work = work
        self.name = name
        self.tty = tty
        self.run = 0
        self.reused = 0
        self.seconds = 0.0
        self.results: list[dict[str, Any]] = []  # results of tasks run now (usage included)

    def __call__(self, fn: Callable[..., dict[str, Any]], tasks: list[tuple[str, tuple[Any, ...]]],
                 require: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """``tasks``: (marker name, arguments); returns every task's marker in order. A marker
        without the ``require`` entries does not count as done (see :meth:`WorkDir.done`)."""
        started = time.monotonic()
        markers: list[dict[str, Any] | None] = [self.work.done(marker, require) for marker, _ in tasks]
        skip = {i for i, marker in enumerate(markers) if marker is not None}
        self.reused = len(skip)

        def failed(_index: int, exc: Exception) -> None:
            raise _task_error(self.name, exc) from None

        with Progress(f"dedup {self.name}", total=len(tasks), unit="task", enabled=self.tty) as progress:
            for index, result in ray_map(self.ray, fn, [args for _, args in tasks], skip=skip,
                                         progress=progress, on_error=failed):
                markers[index] = result
                self.results.append(result)
                self.run += 1
        self.seconds = time.monotonic() - started
        if not self.tty:
            print(f"dedup: {self.name}: {self.run} task(s) run, {self.reused} reused, "
                  f"{self.seconds:.1f} s", file=sys.stderr)
        return [m for m in markers if m is not None]

    def report(self) -> dict[str, Any]:
        peak = max((r["peak_rss"] for r in self.results), default=0)
        grown = max((r["task_rss"] for r in self.results), default=0)
        # RSS of a worker when a task starts: its smallest value is an idle worker with numpy and
        # feedline loaded, the floor every worker pays whatever the task
        idle = min((r.get("start_rss", 0) for r in self.results), default=0)
        return {"tasks": self.run + self.reused, "run": self.run, "reused": self.reused,
                "seconds": round(self.seconds, 3), "cpu_s": round(sum(r["cpu_s"] for r in self.results), 3),
                "peak_worker_rss": peak, "peak_task_rss": grown, "idle_worker_rss": idle}


def _task_error(stage: str, exc: Exception) -> FeedlineError:
    """A task's own feedline error as is (one line naming the file); anything else named."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, FeedlineError):
        return cause
    if isinstance(exc, FeedlineError) and cause is None:
        return exc
    what = cause if cause is not None else exc
    return DedupError(f"{stage} task failed: {type(what).__name__}: {str(what).splitlines()[0] if str(what) else ''}")


def run_ray_dedup(
    inputs: list[str],
    names: list[str],
    out_dir: Path,
    config: DedupConfig,
    *,
    text_field: str = "text",
    skip_bad_lines: bool = False,
    workers: int | None = None,
    ray_address: str | None = None,
    work_dir: Path | None = None,
    partitions: int | None = None,
) -> dict[str, Any]:
    """Deduplicate ``inputs`` (local paths or URLs, in order) into ``out_dir`` on Ray; returns the
    summary written to ``dedup.json`` (the engine's keys, plus ``executor`` with per-stage counts)."""
    import_ray(DedupError)  # before anything is read: without Ray, one line
    started = time.monotonic()
    work_root = Path(work_dir) if work_dir is not None else out_dir / WORK_DIR_NAME
    check_outputs(inputs, names, out_dir, work_root)  # before Ray starts: one line, nothing written
    out_dir.mkdir(parents=True, exist_ok=True)
    identities = [input_identity(source) for source in inputs]
    with ray_session(ray_address, num_cpus=workers, error=DedupError) as ray:
        if partitions is None:
            partitions = WorkDir.recorded_partitions(work_root)
        if partitions is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            partitions = _PARTITIONS_PER_CPU * max(1, min(cpus, workers or cpus))
        params = {
            "schema": 1,
            "dedup": config.to_dict(),
            "signatures": SIGNATURE_SCHEME,
            "partitions": partitions,
            "out": str(out_dir.absolute()),
            "text_field": text_field,
            "skip_bad_lines": skip_bad_lines,
            "inputs": [{**ident, "output": name} for ident, name in zip(identities, names, strict=True)],
        }
        work = WorkDir(work_root, params)
        work.claim()
        with process_lock(work_root / ".lock", timeout_s=0, remove=True):
            return _run(ray, work, inputs, names, out_dir, config, params, started,
                        text_field=text_field, skip_bad_lines=skip_bad_lines, partitions=partitions)


def _run(
    ray: Any,
    work: WorkDir,
    inputs: list[str],
    names: list[str],
    out_dir: Path,
    config: DedupConfig,
    params: dict[str, Any],
    started: float,
    *,
    text_field: str,
    skip_bad_lines: bool,
    partitions: int,
) -> dict[str, Any]:
    # Tasks get absolute paths: a worker of a cluster joined with --ray-address runs in its own
    # folder, where the driver's relative paths name other files or none.
    located = [source if is_url(source) else os.path.abspath(local_path(source)) for source in inputs]
    plan = stages.Plan(
        work_root=str(work.root.absolute()), params=params, out_dir=str(out_dir.absolute()),
        inputs=tuple(zip(located, names, strict=True)), config=config, partitions=partitions,
        text_field=text_field, skip_bad_lines=skip_bad_lines,
    )
    tty = sys.stderr.isatty()
    runners = {name: _Stage(ray, work, name, tty) for name in STAGES}
    plan_ref = ray.put(plan)
    shards = range(len(inputs))
    ids = {"doc_ids": DOC_IDS}  # the tasks that store or write ids redo a work dir's older ones
    sig = runners["signatures"](stages.signatures_task, [(f"sig/s{s:05d}", (plan_ref, s)) for s in shards], ids)
    counts = [int(m["documents"]) for m in sig]
    counts_ref = ray.put(counts)
    parts = range(partitions)
    buckets = runners["buckets"](
        stages.buckets_task, [(f"buckets/p{p:04d}", (plan_ref, p, counts_ref)) for p in parts]
    )
    cluster = runners["cluster"](stages.cluster_task, [("cluster/cluster", (plan_ref,))])[0]
    runners["resolve"](stages.resolve_task, [(f"resolve/r{k:04d}", (plan_ref, k, counts_ref)) for k in parts])
    for s, name in enumerate(names):  # an output deleted since its task ran is written again
        if not ((out_dir / name).exists() or stages.staged_path(out_dir, name).exists()):
            work.marker(f"write/s{s:05d}").clear()
    written = runners["write"](stages.write_task, [(f"write/s{s:05d}", (plan_ref, s, counts_ref)) for s in shards],
                               ids)
    for name in names:  # every write task succeeded: the kept shards take their names together
        staged = stages.staged_path(out_dir, name)
        if staged.exists():
            install(staged, out_dir / name)
    sha = stages.join_verdicts(work, len(inputs), out_dir / "verdicts.jsonl")
    keys = ("documents", *KINDS)
    shard_rows = [
        {"input": source, "output": name, **{k: int(m[k]) for k in keys}}
        for source, name, m in zip(inputs, names, written, strict=True)
    ]
    totals = {k: sum(row[k] for row in shard_rows) for k in keys}
    index_bytes = [int(m["index_bytes"]) for m in buckets]
    summary = {
        "schema": 1,
        "parameters": config.to_dict(),
        "shards": shard_rows,
        "totals": totals,
        "index_bytes": max(index_bytes, default=0),
        "indexed_documents": sum(int(m["indexed"]) for m in sig),
        "verdicts": "verdicts.jsonl",
        "verdicts_sha256": sha,
        "seconds": round(time.monotonic() - started, 3),
        "executor": {
            "name": "ray",
            "partitions": partitions,
            "work_dir": str(work.root),
            "index_bytes_total": sum(index_bytes),
            "band_entries": sum(int(m["band_entries"]) for m in sig),
            "cluster_index_bytes": int(cluster["index_bytes"]),
            "clusters": int(cluster["clusters"]),
            "largest_cluster": int(cluster["largest_cluster"]),
            "stages": {name: runner.report() for name, runner in runners.items()},
        },
    }
    with atomic_write(out_dir / "dedup.json", "wb") as f:
        import orjson

        f.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return summary
