"""``feedline dedup --executor ray`` at 1 and 2 workers vs the one-process engine, same corpus.

    .venv/bin/python bench/dedup_ray.py [--docs 40000] [--shards 8] [--repeat 3]

Corpus: the planted corpus of tests/dedup/planted_corpus.py (~2 KB documents, 88 % originals,
8 % near duplicates, 4 % case/whitespace copies) written as ``--shards`` JSONL files. Each run is
a fresh process (the engine through ``dedup_files``, Ray through ``run_ray_dedup`` on a local Ray
started with ``num_cpus=workers``, a fresh work dir each time). Reported, medians of ``--repeat``:

* documents per CPU-second. Engine: the process's CPU time. "stages, no Ray": the Ray
  executor's stage functions called in order in one process (what the staged algorithm costs
  without Ray). Ray, two ways: the tasks' own CPU
  time plus the driver's ("task CPU"), and every process of the Ray instance (raylet, GCS,
  workers, driver) from /proc between the start and the end of the dedup ("cluster CPU").
  Ray's start-up (~10 s here) is not in either; it is paid once per cluster, not per job.
  Nor is Ray's lazy start-up (the driver's serialization context, each worker's first task):
  one no-op task per worker runs before the clock starts, and its CPU is printed apart.
* the ratio of each to the engine, measured in the same run of this script;
* peak RSS of the largest task (each task resets its worker's peak at start, /proc clear_refs)
  per stage, and of the engine process;
  the largest partition's index arrays (stage 2), which is what shrinks as workers (and so
  partitions) are added;
* a projection to 1e9 documents from the measured bytes per document: stage-2 index arrays in
  total, the single cluster task's arrays, and the work dir on disk.
All runs check that the Ray verdicts file equals the engine's (same sha256).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_TICKS = os.sysconf("SC_CLK_TCK")


def _write_corpus(folder: Path, docs: int, shards: int) -> list[str]:
    import orjson
    from tests.dedup.planted_corpus import make_corpus

    corpus = make_corpus(int(docs * 0.88), int(docs * 0.08), docs - int(docs * 0.88) - int(docs * 0.08), seed=11)
    lines = [orjson.dumps({"id": i, "text": t}) + b"\n" for i, t in zip(corpus.ids, corpus.texts, strict=True)]
    paths = []
    per = -(-len(lines) // shards)
    for s in range(shards):
        path = folder / f"part-{s:03d}.jsonl"
        path.write_bytes(b"".join(lines[s * per : (s + 1) * per]))
        paths.append(str(path))
    return paths


def _tree_cpu(root_pid: int) -> float:
    """CPU seconds (user + system) of ``root_pid`` and every live descendant, from /proc."""
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


def _warm_up() -> int:
    """A no-op task (defined here, so it imports nothing of feedline): Ray's lazy start-up."""
    time.sleep(0.3)  # long enough that every worker gets one
    return os.getpid()


def _child(kind: str, workers: int, inputs: list[str], out: Path) -> dict:
    from feedline.dedup.cli import _output_names, dedup_files
    from feedline.dedup.engine import DedupConfig

    config = DedupConfig(threshold=0.8)
    names = _output_names(inputs)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "engine":
        started = time.process_time()
        summary = dedup_files([Path(p) for p in inputs], out, config)
        cpu = time.process_time() - started
        return {"documents": summary["totals"]["documents"], "cpu_s": cpu, "task_cpu_s": cpu,
                "wall_s": summary["seconds"], "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "index_bytes": summary["index_bytes"], "sha": summary["verdicts_sha256"]}
    if kind == "stages":
        return _stages_in_process(inputs, names, out, config)
    import ray

    from feedline.dedup.ray_executor import run_ray_dedup

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        # Ray finishes starting lazily: the driver's first submission builds its serialization
        # context (imports), each worker's first task does the same. One no-op task per worker
        # before the clock starts keeps that start-up out, as ray.init is; the workers still
        # import numpy and feedline inside the measured job, with its first real task.
        warm_before = _tree_cpu(os.getpid())
        warm = ray.remote(num_cpus=1)(_warm_up)
        warmed = len(set(ray.get([warm.remote() for _ in range(workers)])))
        warm_cpu = _tree_cpu(os.getpid()) - warm_before
        before = _tree_cpu(os.getpid())
        driver_before = time.process_time()
        summary = run_ray_dedup(inputs, names, out, config, partitions=4 * workers)
        driver_cpu = time.process_time() - driver_before
        cluster_cpu = _tree_cpu(os.getpid()) - before
    finally:
        ray.shutdown()
    ex = summary["executor"]
    stages = ex["stages"]
    work_bytes = sum(p.stat().st_size for p in Path(ex["work_dir"]).rglob("*") if p.is_file())
    return {"documents": summary["totals"]["documents"], "cpu_s": cluster_cpu,
            "task_cpu_s": sum(s["cpu_s"] for s in stages.values()) + driver_cpu,
            "wall_s": summary["seconds"], "peak_rss": max(s["peak_worker_rss"] for s in stages.values()),
            "index_bytes": summary["index_bytes"], "index_bytes_total": ex["index_bytes_total"],
            "cluster_bytes": ex.get("cluster_index_bytes", 0), "work_bytes": work_bytes,
            "stage_cpu": {k: s["cpu_s"] for k, s in stages.items()},
            "stage_rss": {k: s["peak_worker_rss"] for k, s in stages.items()},
            "stage_growth": {k: s["peak_task_rss"] for k, s in stages.items()},
            "idle_rss": min(s.get("idle_worker_rss", 0) for s in stages.values()),
            "driver_cpu_s": driver_cpu, "warm_up_cpu_s": warm_cpu, "warmed_workers": warmed,
            "sha": summary["verdicts_sha256"]}


def _stages_in_process(inputs: list[str], names: list[str], out: Path, config: object) -> dict:
    """The Ray executor's stage functions called one after another in this process: the cost of
    the staged algorithm itself, without Ray's processes."""
    from feedline.dedup import stages

    plan = stages.Plan(str(out / ".dedup-work"), {"bench": 1}, str(out), tuple(zip(inputs, names, strict=True)),
                       config, 4)  # type: ignore[arg-type]
    started, wall = time.process_time(), time.monotonic()
    counts = [stages.signatures_task(plan, s)["documents"] for s in range(len(inputs))]
    for p in range(plan.partitions):
        stages.buckets_task(plan, p, counts)
    stages.cluster_task(plan)
    for k in range(plan.partitions):
        stages.resolve_task(plan, k, counts)
    written = [stages.write_task(plan, s, counts) for s in range(len(inputs))]
    sha = stages.join_verdicts(plan.work(), len(inputs), out / "verdicts.jsonl")
    cpu = time.process_time() - started
    return {"documents": sum(w["documents"] for w in written), "cpu_s": cpu, "task_cpu_s": cpu, "wall_s": time.monotonic() - wall,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "index_bytes": 0, "sha": sha}


def _run(kind: str, workers: int, inputs: list[str], out: Path, src: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--workers", str(workers), "--out", str(out), *inputs]
    env = None
    if src:  # Ray's workers inherit PYTHONPATH from the driver, so they run that version too
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=40_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=("engine", "stages", "ray"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--src", action="append", default=[], metavar="LABEL=DIR",
                        help="also run Ray at 1 and 2 workers with feedline imported from DIR, as ray[LABEL]")
    parser.add_argument("inputs", nargs="*")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.workers, args.inputs, Path(args.out))))
        return
    with tempfile.TemporaryDirectory(prefix="dedup-ray-bench-") as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        inputs = _write_corpus(root / "in", args.docs, args.shards)
        mb = sum(os.path.getsize(p) for p in inputs) / 1e6
        print(f"corpus: {args.docs} documents, {args.shards} shards, {mb:.1f} MB; load average {os.getloadavg()[0]:.1f}")
        sources = dict(item.split("=", 1) for item in args.src)
        configs = [("engine", 1), ("stages", 1), ("ray", 1), ("ray", 2)]
        configs += [(f"ray[{label}]", w) for label in sources for w in (1, 2)]
        results: dict[tuple[str, int], list[dict]] = {c: [] for c in configs}
        for r in range(args.repeat):
            for kind, workers in configs:  # interleaved, so load changes hit every config alike
                out = root / f"out-{kind}-{workers}-{r}".replace("[", "-").replace("]", "")
                label = kind[4:-1] if kind.startswith("ray[") else None
                src = str(Path(sources[label]).resolve()) if label else None
                results[(kind, workers)].append(_run("ray" if label else kind, workers, inputs, out, src))
        sha = {x["sha"] for runs in results.values() for x in runs}
        assert len(sha) == 1, "Ray verdicts differ from the engine's"
        med = {c: {k: statistics.median(x[k] for x in runs) for k in runs[0] if isinstance(runs[0][k], int | float)}
               for c, runs in results.items()}
        docs = med[("engine", 1)]["documents"]
        base = docs / med[("engine", 1)]["cpu_s"]
        print(f"load average after: {os.getloadavg()[0]:.1f}; verdicts identical in every run: yes")
        print()
        print("| executor | workers | docs / CPU-s (all processes) | vs engine | docs / task CPU-s | vs engine "
              "| wall s | peak RSS, largest worker | index held by one task |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (kind, workers), m in med.items():
            rate = docs / m["cpu_s"]
            task_rate = docs / m["task_cpu_s"]
            index = f"{m['index_bytes'] / 1e6:.1f} MB" if m["index_bytes"] else "-"
            label = "stages, no Ray" if kind == "stages" else kind
            print(f"| {label} | {workers} | {rate:,.0f} | {rate / base:.2f}x | {task_rate:,.0f} | {task_rate / base:.2f}x "
                  f"| {m['wall_s']:.1f} | {m['peak_rss'] / 2**20:.0f} MiB | {index} |")
        print()
        for kind, workers in [c for c in configs if c[0].startswith("ray")]:
            m = med[(kind, workers)]
            rate = docs / (m["cpu_s"] + m["warm_up_cpu_s"])
            print(f"{kind} {workers} worker(s), all processes with Ray's lazy start-up counted: "
                  f"{rate:,.0f} docs/CPU-s, {rate / base:.2f}x the engine")
        print()
        for kind, workers in [c for c in configs if c[0].startswith("ray")]:
            runs = results[(kind, workers)]
            name = f"{kind} {workers}"
            stage_cpu = {k: statistics.median(x["stage_cpu"][k] for x in runs) for k in runs[0]["stage_cpu"]}
            stage_rss = {k: statistics.median(x["stage_rss"][k] for x in runs) for k in runs[0]["stage_rss"]}
            print(f"{name} worker(s), task CPU-s per stage: " + ", ".join(f"{k} {v:.2f}" for k, v in stage_cpu.items()))
            growth = {k: statistics.median(x["stage_growth"][k] for x in runs) for k in runs[0]["stage_growth"]}
            print(f"{name} worker(s), peak worker RSS per stage (task's own growth): "
                  + ", ".join(f"{k} {v / 2**20:.0f} MiB (+{growth[k] / 2**20:.1f})" for k, v in stage_rss.items()))
            idle = statistics.median(x["idle_rss"] for x in runs)  # 0: that version does not report it
            if idle:
                above = {k: v - idle for k, v in stage_rss.items()}
                print(f"{name} worker(s), idle worker (numpy + feedline loaded, RSS when its first task starts) "
                      f"{idle / 2**20:.0f} MiB; peak above it per stage: "
                      + ", ".join(f"{k} +{v / 2**20:.1f} MiB" for k, v in above.items())
                      + f"; largest +{max(above.values()) / 2**20:.1f} MiB")
            driver = statistics.median(x["driver_cpu_s"] for x in runs)
            ray_own = statistics.median(x["cpu_s"] - x["task_cpu_s"] for x in runs)
            warm = statistics.median(x["warm_up_cpu_s"] for x in runs)
            print(f"{name} worker(s), driver CPU-s {driver:.2f}; Ray's own processes "
                  f"(all processes minus task CPU) {ray_own:.2f}; Ray's lazy start-up before the clock "
                  f"(one no-op task per worker, not counted above) {warm:.2f} CPU-s, "
                  f"{min(x['warmed_workers'] for x in runs)} worker(s) warmed")
        m = med[("ray", 2)]
        per_doc_index = m["index_bytes_total"] / docs
        per_doc_cluster = m["cluster_bytes"] / docs
        per_doc_disk = m["work_bytes"] / docs
        print()
        print(f"measured per document: stage-2 index arrays {per_doc_index:.0f} B (all partitions), "
              f"cluster task arrays {per_doc_cluster:.1f} B, work dir on disk {per_doc_disk:.0f} B")
        billion = 1e9
        print(f"projection for 1e9 documents: stage-2 index {per_doc_index * billion / 2**30:,.0f} GiB in total "
              f"-> {per_doc_index * billion / (4 * 2**30):,.0f} partitions of 4 GiB "
              f"(~2x that per task while sorting); cluster task {per_doc_cluster * billion / 2**30:,.1f} GiB "
              f"in one process (at this corpus's duplicate rate); work dir {per_doc_disk * billion / 2**40:,.2f} TiB")


if __name__ == "__main__":
    main()
