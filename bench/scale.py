"""Opening large datasets: 10,000 to 1,000,000 episodes over nginx, cold and warm, in fresh processes.

Datasets come from feedline's bulk writer (``feedline.episodes.synth.bulk``): 2 cameras at 64x48
(H.264, GOP 2), episodes of 8-24 frames, 5,000 episodes per data file, per MP4 and per
``meta/episodes`` file, one data row group per episode, per-episode stats. They are written once
into ``--cache-dir`` and reused; nginx serves them (``tests/servers.py``, as the test suite does).

Every figure is measured in a fresh subprocess:

* ``StreamingEpisodeDataset``: the constructor's wall time with an empty ``$FEEDLINE_HOME``
  (cold: the sidecar is built too) and again with the same home (warm); the time to the first
  batch after the open through a ``DataLoader`` with 2 workers; the peak PSS of each worker
  (``/proc/<pid>/smaps_rollup``, feedline's ``PssSampler``); the main process's peak RSS; the
  steady samples/s over ``--steady-batches`` batches after a warm-up, and its ratio to a
  1,000-episode dataset of the same frames measured in the same run;
* ``EpisodeDataset`` (map-style): the open's wall time (warm home), its first batch (2 workers,
  ``shuffle=True``) and the main process's peak RSS;
* ``feedline doctor URL``: wall time and peak RSS (``wait4``), with its own empty home.

A measurement that fails, passes ``--timeout`` or whose processes together pass
``--memory-limit-gb`` of PSS (checked every 0.25 s; the whole process tree is then killed) gets
a one-line reason in its row; the others go on.
Run: ``.venv/bin/python bench/scale.py [--sizes 10000,100000,1000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does
REFERENCE = 1000  # the steady rate's yardstick: the same frames in a small dataset


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- the child side: one measurement per fresh process -----------------------------------------


def child_stream(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from feedline.episodes import StreamingEpisodeDataset
    from feedline.episodes.forecast.measure import PssSampler

    began = time.perf_counter()
    ds = StreamingEpisodeDataset(root=url, return_uint8=True)
    open_s = time.perf_counter() - began
    rss_open = _peak_rss_mib()
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=4, timeout=args.timeout)
    rate = None
    with PssSampler() as pss:
        began = time.perf_counter()
        batches = iter(loader)
        next(batches)
        first_s = time.perf_counter() - began
        if args.steady_batches:
            for _ in range(args.warm_batches):
                next(batches)
            began, samples = time.perf_counter(), 0
            for _ in range(args.steady_batches):
                samples += len(next(batches)["index"])
            rate = samples / (time.perf_counter() - began)
        del batches
    return {"open_s": open_s, "first_batch_s": first_s, "rate": rate, "rss_open_mib": rss_open,
            "rss_peak_mib": _peak_rss_mib(), "pss_worker_mib": pss.worker_peak_mib}


def child_map(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from feedline.episodes import EpisodeDataset
    from feedline.episodes.forecast.measure import PssSampler

    began = time.perf_counter()
    ds = EpisodeDataset(root=url, return_uint8=True)
    open_s = time.perf_counter() - began
    rss_open = _peak_rss_mib()
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        prefetch_factor=4, timeout=args.timeout,
                        generator=torch.Generator().manual_seed(0))
    with PssSampler() as pss:
        began = time.perf_counter()
        batches = iter(loader)
        next(batches)
        first_s = time.perf_counter() - began
        del batches
    return {"open_s": open_s, "first_batch_s": first_s, "rss_open_mib": rss_open,
            "rss_peak_mib": _peak_rss_mib(), "pss_worker_mib": pss.worker_peak_mib}


CHILDREN = {"stream": child_stream, "map": child_map}


# ---- the parent side ---------------------------------------------------------------------------


class Skipped(Exception):
    """A measurement that failed or timed out: its one-line reason goes into the table."""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else "no output"


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (DataLoader workers, the decoders they start)."""
    out, todo = [], [pid]
    while todo:
        here = todo.pop()
        out.append(here)
        for task in Path(f"/proc/{here}/task").glob("*"):
            try:
                todo += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def run_guarded(command: list[str], env: dict[str, str], what: str,
                args: argparse.Namespace) -> tuple[str, float, float, float]:
    """Run ``command`` in its own session with ``--timeout`` and ``--memory-limit-gb`` (the
    summed PSS of its process tree, so a 1M-episode run cannot push the machine into swap);
    return its stdout, wall seconds, peak RSS of the main process (``wait4``) and the tree's
    peak PSS, both in MiB. A failure, a timeout or the limit raises :class:`Skipped`."""
    from feedline.episodes.forecast.costs import pss_of

    limit = args.memory_limit_gb * 2**30
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
        peak = 0
        reason = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, sum(pss_of(p) for p in _tree(proc.pid)))
            if peak > limit:
                reason = f"{what}: stopped at {peak / 2**30:.1f} GiB PSS (--memory-limit-gb {args.memory_limit_gb:g})"
            elif time.perf_counter() - began > args.timeout:
                reason = f"{what}: timed out after {args.timeout:.0f} s"
            if reason:
                os.killpg(proc.pid, signal.SIGKILL)
                os.waitpid(proc.pid, 0)
                proc.returncode = -9
                raise Skipped(reason)
            time.sleep(0.25)
        seconds = time.perf_counter() - began
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if code != 0:
        raise Skipped(f"{what}: exit {code}: {_last_line(stderr)}")
    return stdout, seconds, usage.ru_maxrss / 1024, peak / 2**20


def measure(kind: str, url: str, home: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one child measurement in a fresh process with ``$FEEDLINE_HOME`` = ``home``."""
    command = [sys.executable, __file__, "--child", kind, "--url", url,
               "--batch-size", str(args.batch_size), "--workers", str(args.workers),
               "--steady-batches", str(args.steady_batches if kind == "stream" else 0),
               "--warm-batches", str(args.warm_batches), "--timeout", str(args.timeout)]
    env = {**os.environ, "FEEDLINE_HOME": str(home)}
    stdout, _, _, tree_pss = run_guarded(command, env, kind, args)
    return {**json.loads(stdout.strip().splitlines()[-1]), "tree_pss_mib": tree_pss}


def measure_doctor(url: str, home: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``feedline doctor URL`` as a user runs it: wall time and peak RSS. Its exit code is its
    count of errors (none on these datasets), so a non-zero one is reported as a failure."""
    env = {**os.environ, "FEEDLINE_HOME": str(home)}
    command = [str(Path(sys.executable).parent / "feedline"), "doctor", url]
    _, seconds, rss, _ = run_guarded(command, env, "doctor", args)
    return {"seconds": seconds, "rss_peak_mib": rss}


def dataset(cache: Path, episodes: int, args: argparse.Namespace) -> tuple[Path, float | None]:
    """The cached bulk dataset of ``episodes`` (written now if missing) and the write's seconds."""
    from feedline.episodes.synth.bulk import write_bulk_dataset

    root = cache / f"bulk-{episodes}"
    if (root / "meta" / "info.json").is_file():
        return root, None
    print(f"writing {episodes:,} episodes to {root} ...", flush=True)
    began = time.perf_counter()
    write_bulk_dataset(root, episodes=episodes, episodes_per_file=args.episodes_per_file)
    return root, time.perf_counter() - began


def _f(value: Any, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def run_size(episodes: int, server: Any, work: Path, args: argparse.Namespace,
             reference_rate: float | None) -> dict[str, Any]:
    """Every figure of one size; a failure leaves the rest of the row to the sizes after it."""
    row: dict[str, Any] = {"episodes": episodes, "notes": []}
    try:
        root, row["write_s"] = dataset(Path(args.cache_dir), episodes, args)
    except Exception as exc:  # noqa: BLE001 - one line in the table, then the next size
        row["notes"].append(f"write: {type(exc).__name__}: {exc}"[:160])
        return row
    link = Path(server.root) / root.name
    if not link.exists():
        link.symlink_to(root, target_is_directory=True)
    url = f"{server.url}/{root.name}"
    home = work / f"home-{episodes}"
    for name, kind, where in (("cold", "stream", home), ("warm", "stream", home),
                              ("map", "map", home)):
        try:
            row[name] = measure(kind, url, where, args)
            print(f"  {episodes:,} {name}: {json.dumps(row[name])}", flush=True)
        except Skipped as exc:
            row["notes"].append(str(exc))
            print(f"  {episodes:,} {name}: skipped: {exc}", flush=True)
    if not args.no_doctor:
        try:
            row["doctor"] = measure_doctor(url, work / f"doctor-home-{episodes}", args)
            print(f"  {episodes:,} doctor: {json.dumps(row['doctor'])}", flush=True)
        except Skipped as exc:
            row["notes"].append(str(exc))
    rate = (row.get("warm") or {}).get("rate")
    row["ratio"] = rate / reference_rate if rate and reference_rate else None
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| episodes | write | open cold | open warm | first batch cold / warm | main RSS peak "
            "| worker PSS peak | steady samples/s (vs 1k) | map-style open / first batch / RSS "
            "| doctor time / RSS | notes |\n|" + "---|" * 11)
    lines = [head]
    for r in rows:
        cold, warm, mapped, doc = (r.get(k) or {} for k in ("cold", "warm", "map", "doctor"))
        rate = warm.get("rate")
        steady = "-" if rate is None else f"{rate:.0f}" + (f" (x{r['ratio']:.2f})" if r.get("ratio") else "")
        lines.append(
            f"| {r['episodes']:,} | {_f(r.get('write_s'), ' s', 0) if r.get('write_s') else 'cached'} "
            f"| {_f(cold.get('open_s'), ' s')} | {_f(warm.get('open_s'), ' s')} "
            f"| {_f(cold.get('first_batch_s'), ' s')} / {_f(warm.get('first_batch_s'), ' s')} "
            f"| {_f(max(cold.get('rss_peak_mib', 0), warm.get('rss_peak_mib', 0)) or None, ' MiB', 0)} "
            f"| {_f(max(cold.get('pss_worker_mib', 0), warm.get('pss_worker_mib', 0)) or None, ' MiB', 0)} "
            f"| {steady} "
            f"| {_f(mapped.get('open_s'), ' s')} / {_f(mapped.get('first_batch_s'), ' s')} / "
            f"{_f(mapped.get('rss_peak_mib'), ' MiB', 0)} "
            f"| {_f(doc.get('seconds'), ' s')} / {_f(doc.get('rss_peak_mib'), ' MiB', 0)} "
            f"| {'; '.join(r['notes']) or ''} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000",
                        help="episode counts, comma-separated (1000000 for the 1M figure)")
    parser.add_argument("--cache-dir", default=str(Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "feedline-bench" / "scale"),
        help="where the written datasets are kept between runs")
    parser.add_argument("--episodes-per-file", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steady-batches", type=int, default=300)
    parser.add_argument("--warm-batches", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    parser.add_argument("--memory-limit-gb", type=float, default=14.0,
                        help="stop a measurement whose processes' summed PSS passes this")
    parser.add_argument("--no-doctor", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.url, args)), flush=True)
        return 0

    from tests.servers import run_nginx

    Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="feedline-bench-scale-") as tmp, \
            run_nginx(Path(tmp) / "nginx") as server:
        work = Path(tmp)
        reference = run_size(REFERENCE, server, work, args, None)
        reference_rate = (reference.get("warm") or {}).get("rate")
        reference["ratio"] = 1.0 if reference_rate else None
        rows.append(reference)
        for episodes in sizes:
            rows.append(run_size(episodes, server, work, args, reference_rate))
    print(f"\nuptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
