"""Benchmark the streaming reader against LeRobot's Lance loader on LeRobot's medium dataset.

Why: users weigh feedline against ``lerobot-lancedb`` (0.3.1, beside LeRobot 0.6.1), which converts a
LeRobot v3 dataset into Lance tables (frames, videos as blobs, meta) and reads them with a
map-style ``LanceDBDataset`` under a ``DataLoader`` global shuffle. The goal of the comparison:
feedline's ``StreamingEpisodeDataset`` at >= 1.5x Lance's samples/s at equal batch diversity.

What: "LeRobot's medium dataset" (LeRobot 0.6.1's own writer, ``bench/lerobot_dataset.py``, cached in
``--cache-dir``; 96x128 AV1, 80 episodes, two cameras) is converted to Lance once (cached beside
it; the conversion time is reported apart, measured when it ran). Then, in interleaved rounds
(``--repeats N``), each reader runs through a real ``DataLoader`` (2 workers, batch 16,
``prefetch_factor=4``, uint8 frames) with bench/streaming.py's windows -
``cam_high: [-2, -1, 0] / fps`` and ``action: [0..7] / fps`` (``LanceDBDataset`` takes
``delta_timestamps``, so the history window is like for like; ``cam_low`` is one frame on both):

* ``lance`` - ``LanceDBDataset`` on the local Lance folder, ``shuffle=True`` (its global shuffle),
  the loader's own ``multiprocessing_context`` (forkserver), run by ``--lance-python`` (a Python
  3.12 venv with ``lerobot[dataset]==0.6.1`` and ``lerobot-lancedb==0.3.1``) as a subprocess;
* ``feedline-http`` - ``StreamingEpisodeDataset`` over nginx (HTTP ranges), its default pool;
* ``feedline-local`` - the same reader on the local LeRobot folder.

Each run reads ``--samples`` samples (0: one whole epoch) and reports samples/s (first batch
included, and after the first batch: Lance's start-up - forkserver workers importing LeRobot,
opening the tables - weighs on a short run), first batch, p95 batch wait, peak PSS per worker process, and batch diversity counted
the same way on every side: the batches' ``episode_index`` fed to
:class:`~feedline.streaming.schedule.diversity.BatchDiversity` (distinct episodes per batch, per 10
batches, share of episodes seen by 10 % of the epoch), beside an ideal global shuffle of the same
episode lengths. The ratio feedline/Lance is the median of each round's ratio (back to back runs).
A short warm-up run (320 samples) of each side precedes the rounds (feedline builds its sidecar
cache then).

Run: ``.venv/bin/python bench/lance.py --lance-python <venv with lerobot-lancedb>/bin/python
[--repeats 2] [--samples 3200]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does
sys.path.insert(0, str(ROOT / "bench"))

from streaming import LEROBOT_DATASET, deltas, episode_lengths  # noqa: E402

LANCE_DATASET = f"{LEROBOT_DATASET}-lance"

CONVERT_SCRIPT = """
import json, sys, time
from pathlib import Path
from lerobot_lancedb.convert import convert
began = time.perf_counter()
convert(Path(sys.argv[2]), root=Path(sys.argv[1]))
print(json.dumps({"conversion_s": time.perf_counter() - began}))
"""

# Prints one JSON line per batch (its episode indices) so diversity is counted by feedline's own
# BatchDiversity in the parent, then a summary line.
LANCE_SCRIPT = """
import json, sys, time, numpy as np, torch
from lerobot_lancedb import LanceDBDataset, lance_mp_context
root, deltas, workers, batch_size, limit = (sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]),
                                            int(sys.argv[4]), int(sys.argv[5]))
ds = LanceDBDataset(root=root, delta_timestamps=deltas, return_uint8=True)
loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                     prefetch_factor=4, multiprocessing_context=lance_mp_context(),
                                     generator=torch.Generator().manual_seed(0))
began = last = time.perf_counter(); first = None; samples = 0; waits = []
for batch in loader:
    now = time.perf_counter(); waits.append(now - last)
    first = now - began if first is None else first
    samples += len(batch["index"])
    print(json.dumps({"episodes": batch["episode_index"].tolist()}), flush=True)
    if limit and samples >= limit:
        break
    last = time.perf_counter()
seconds = time.perf_counter() - began
print(json.dumps({"samples": samples, "seconds": seconds, "rate": samples / seconds, "frames": len(ds),
                  "first_batch_s": first, "p95_wait_ms": 1e3 * float(np.percentile(waits, 95))}))
"""


class TreePss:
    """Peak PSS of every descendant process of ``root`` (this process by default), every 0.2 s:
    the DataLoader workers, wherever their start method parents them (forkserver included)."""

    def __init__(self, root: int | None = None) -> None:
        self.root = root or os.getpid()
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _children(pid: int) -> list[int]:
        out: list[int] = []
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    out += [int(p) for p in (task / "children").read_text().split()]
        return out

    def _descendants(self) -> list[int]:
        todo, seen = self._children(self.root), []
        while todo:
            pid = todo.pop()
            seen.append(pid)
            todo += self._children(pid)
        return seen

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pid in self._descendants():
                try:
                    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    if line.startswith("Pss:"):
                        self.peak[pid] = max(self.peak.get(pid, 0), int(line.split()[1]) * 1024)

    def start(self) -> TreePss:
        self._thread.start()
        return self

    def stop(self, skip: set[int] = frozenset()) -> float:
        """The largest peak (MiB) over the descendants, ``skip`` left out."""
        self._stop.set()
        self._thread.join()
        return max((v for pid, v in self.peak.items() if pid not in skip), default=0) / 2**20


def _diversity(per_batch: list[np.ndarray], lengths: list[int], batch_size: int) -> dict[str, float]:
    from feedline.streaming.schedule.diversity import BatchDiversity

    diversity = BatchDiversity(batch_size)
    diversity.begin_epoch(len(lengths), sum(lengths))
    for episodes in per_batch:
        diversity.record(np.asarray(episodes))
    return diversity.report().as_dict()


def convert_once(args: argparse.Namespace) -> dict[str, Any]:
    """The Lance copy of the medium dataset, converted once into ``--cache-dir``."""
    source = Path(args.cache_dir) / LEROBOT_DATASET
    target = Path(args.cache_dir) / LANCE_DATASET
    stamp = target / "feedline-bench.json"
    if not (source / "meta" / "info.json").exists():
        raise SystemExit(f"{source} is missing: run bench/streaming.py --datasets {LEROBOT_DATASET} "
                         "--lerobot-python ... once to write it")
    if not stamp.exists():
        print(f"converting {source} to Lance in {target} (once)", flush=True)
        done = subprocess.run([args.lance_python, "-c", CONVERT_SCRIPT, str(source), str(target)],
                              capture_output=True, text=True, env=_lance_env(), check=False)
        if done.returncode != 0:
            raise SystemExit(f"Lance conversion failed:\n{done.stderr[-3000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        out["bytes"] = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
        out["source_bytes"] = sum(f.stat().st_size for f in source.rglob("*") if f.is_file())
        stamp.write_text(json.dumps(out))
    return {**json.loads(stamp.read_text()), "root": str(target)}


def _lance_env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    return env


def run_lance(root: str, lengths: list[int], args: argparse.Namespace) -> dict[str, Any]:
    proc = subprocess.Popen(
        [args.lance_python, "-c", LANCE_SCRIPT, root, json.dumps(deltas()), str(args.workers),
         str(args.batch_size), str(args.samples)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_lance_env(),
    )
    pss = TreePss(proc.pid).start()
    stdout, stderr = proc.communicate()
    # the forkserver process itself is a descendant too: its own PSS is far below a worker's
    worker_mib = pss.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"Lance run failed:\n{stderr[-3000:]}")
    lines = [json.loads(line) for line in stdout.strip().splitlines() if line.startswith("{")]
    per_batch = [line["episodes"] for line in lines if "episodes" in line]
    out = lines[-1]
    return {**out, "pss_mib": worker_mib, "diversity": _diversity(per_batch, lengths, args.batch_size)}


def run_feedline(root: str, lengths: list[int], args: argparse.Namespace) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    ds = StreamingEpisodeDataset(root=root, delta_timestamps=deltas(), return_uint8=True)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, prefetch_factor=4)
    pss = TreePss().start()
    per_batch: list[np.ndarray] = []
    waits: list[float] = []
    began = last = time.perf_counter()
    first = None
    samples = 0
    for batch in loader:
        now = time.perf_counter()
        waits.append(now - last)
        first = now - began if first is None else first
        samples += len(batch["index"])
        per_batch.append(batch["episode_index"].numpy())
        if args.samples and samples >= args.samples:
            break
        last = time.perf_counter()
    seconds = time.perf_counter() - began
    del loader
    return {"samples": samples, "seconds": seconds, "rate": samples / seconds, "first_batch_s": first,
            "p95_wait_ms": 1e3 * float(np.percentile(waits, 95)), "pss_mib": pss.stop(),
            "diversity": _diversity(per_batch, lengths, args.batch_size)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lance-python", required=True,
                        help="python of a venv with lerobot[dataset]==0.6.1 and lerobot-lancedb==0.3.1")
    parser.add_argument("--cache-dir", default=str(Path(os.environ.get(
                            "XDG_CACHE_HOME", Path.home() / ".cache")) / "feedline-bench"),
                        help=f"holds {LEROBOT_DATASET} (bench/streaming.py writes it) and its Lance copy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=0,
                        help="samples per run, the same on every side (0: one whole epoch)")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds; medians reported")
    args = parser.parse_args()

    import shutil

    from tests.servers import run_nginx

    from feedline.streaming.schedule.diversity import ideal_diversity

    converted = convert_once(args)
    source = Path(args.cache_dir) / LEROBOT_DATASET
    lengths = episode_lengths(str(source))
    print(f"Lance copy: {converted['bytes'] / 2**20:.1f} MiB (LeRobot folder "
          f"{converted['source_bytes'] / 2**20:.1f} MiB), converted in {converted['conversion_s']:.1f} s",
          flush=True)
    rounds: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="feedline-bench-lance-") as tmp:
        work = Path(tmp)
        os.environ["FEEDLINE_HOME"] = str(work / "home")  # cold, private sidecar cache
        with run_nginx(work / "nginx") as server:
            shutil.copytree(source, server.root / LEROBOT_DATASET)
            runs = {"lance": (run_lance, converted["root"]),
                    "feedline-http": (run_feedline, f"{server.url}/{LEROBOT_DATASET}"),
                    "feedline-local": (run_feedline, str(source))}
            warm = argparse.Namespace(**{**vars(args), "samples": 320})
            for kind, (run, where) in runs.items():  # warm-up: sidecars, page cache, imports
                result = run(where, lengths, warm)
                print(f"  {kind} (warm-up): {result['rate']:.0f} samples/s", flush=True)
            for round_no in range(max(1, args.repeats)):
                for kind, (run, where) in runs.items():
                    result = run(where, lengths, args)
                    rounds.setdefault(kind, []).append(result)
                    print(f"  {kind} (round {round_no + 1}): {json.dumps(result)}", flush=True)
    ideal = ideal_diversity(lengths, args.batch_size).as_dict()
    keys = ("batch_episodes_mean", "batch_episodes_min", "window_episodes_mean", "early_episode_share")
    print()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}; {args.repeats} round(s), "
          f"{rounds['lance'][0]['samples']} samples per run")
    print("| reader | samples/s (each round) | vs Lance | after the first batch | vs Lance | first batch | p95 batch wait | peak PSS per worker "
          f"| episodes per batch (ideal {ideal[keys[0]]:.2f}) | min | per 10 batches "
          f"(ideal {ideal[keys[2]]:.1f}) | seen by 10 % of the epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for results in rounds.values():
        for r in results:  # after the first batch: start-up (imports, worker spawn, opens) left out
            r["steady_rate"] = (r["samples"] - args.batch_size) / (r["seconds"] - r["first_batch_s"])
    for kind, results in rounds.items():
        median = sorted(results, key=lambda r: r["rate"])[len(results) // 2]
        steady = sorted(r["steady_rate"] for r in results)[len(results) // 2]
        ratio, steady_ratio = (float(np.median([a[k] / b[k] for a, b in zip(results, rounds["lance"], strict=True)]))
                               for k in ("rate", "steady_rate"))
        d = median["diversity"]
        rates = ", ".join(f"{r['rate']:.0f}" for r in results)
        print(f"| {kind} | {median['rate']:.0f} ({rates}) | x{ratio:.2f} | {steady:.0f} | x{steady_ratio:.2f} "
              f"| {median['first_batch_s']:.2f} s "
              f"| {median['p95_wait_ms']:.0f} ms | {median['pss_mib']:.0f} MiB "
              f"| {d[keys[0]]:.2f} | {d[keys[1]]:.0f} | {d[keys[2]]:.1f} | {d[keys[3]]:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
