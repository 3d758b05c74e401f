"""Download and decode throughput of feedline.acquire against the tools users have.

1. MB/s of ``download_shard`` (sha256 of every byte, checkpoint every 32 MiB, rename) vs
   ``curl -s -o`` (no verification at all) on the same file from a local nginx, twice: with the
   data fsynced (feedline's default; curl followed by an fsync of its file) and page-cache only
   (``fsync=False``; plain curl). curl alone never waits for the disk, so only the pairs with
   the same durability compare like with like.
2. Documents/s of ``stream_jsonl`` on a .jsonl.zst shard vs a bare zstandard ``stream_reader`` +
   split + ``orjson.loads`` loop (no line numbers, no truncation check, no error handling).

Both sides run in this process's run, alternating, ``--reps`` times; medians are reported with
the ratio. Run: ``.venv/bin/python bench/download.py`` (``--size-mb`` / ``--docs`` to scale).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import run_nginx  # noqa: E402

from feedline.acquire.download import download_shard  # noqa: E402
from feedline.io.jsonl import stream_jsonl  # noqa: E402


def write_random(path: Path, size: int) -> str:
    hasher = hashlib.sha256()
    block = 8 << 20
    with open(path, "wb") as handle:
        left = size
        while left:
            chunk = os.urandom(min(block, left))
            hasher.update(chunk)
            handle.write(chunk)
            left -= len(chunk)
    return hasher.hexdigest()


def write_corpus(path: Path, docs: int, seed: int = 0) -> int:
    """A zstd JSONL shard of web-like documents (~2 KB of text each, Zipf-ish vocabulary)."""
    rng = random.Random(seed)
    vocab = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
        for _ in range(30_000)
    ]
    weights = [1.0 / (r + 10) for r in range(len(vocab))]
    cctx = zstandard.ZstdCompressor(level=3)
    with open(path, "wb") as raw, cctx.stream_writer(raw) as out:
        for i in range(docs):
            text = " ".join(rng.choices(vocab, weights=weights, k=rng.randint(250, 400)))
            out.write(orjson.dumps({"id": f"doc-{i}", "text": text, "source": "bench"}) + b"\n")
    return path.stat().st_size


def curl_download(curl: str, url: str, target: Path, sync: bool) -> None:
    """curl, optionally followed by the fsync that makes its bytes as durable as feedline's."""
    subprocess.run([curl, "-s", "-f", "-o", str(target), url], check=True)
    if sync:
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def bare_loop(path: Path) -> int:
    count = 0
    with open(path, "rb") as handle:
        reader = zstandard.ZstdDecompressor().stream_reader(handle)
        tail = b""
        while True:
            chunk = reader.read(1 << 20)
            if not chunk:
                break
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                orjson.loads(line)
                count += 1
    return count


def feedline_loop(path: Path) -> int:
    return sum(1 for _ in stream_jsonl(path))


def timed(fn, *args, **kwargs) -> tuple[float, float, object]:
    """Wall seconds, CPU seconds of this process *and* its children (curl), result."""

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    wall, used = time.perf_counter(), cpu()
    out = fn(*args, **kwargs)
    return time.perf_counter() - wall, cpu() - used, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=512, help="download file size (default 512)")
    parser.add_argument("--docs", type=int, default=60_000, help="documents in the zstd shard")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    curl = shutil.which("curl")
    if curl is None:
        print("curl not found", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="feedline-bench-"))
    try:
        with run_nginx(work / "nginx") as nginx:
            size = args.size_mb << 20
            digest = write_random(nginx.root / "shard.bin", size)
            url = f"{nginx.url}/shard.bin"
            out = work / "out"
            out.mkdir()
            keys = ("curl", "curl+fsync", "ours", "ours-nofsync")
            rates: dict[str, list[float]] = {k: [] for k in keys}
            cpu_per_gb: dict[str, list[float]] = {k: [] for k in keys}

            def measure_curl(sync: bool) -> None:
                target = out / "curl.bin"
                wall, used, _ = timed(curl_download, curl, url, target, sync)
                assert target.stat().st_size == size, "curl wrote a short file"
                rates["curl+fsync" if sync else "curl"].append(size / wall / 1e6)
                cpu_per_gb["curl+fsync" if sync else "curl"].append(used / (size / 1e9))
                target.unlink()

            def measure_ours(sync: bool) -> None:
                dest = out / "feedline.bin"
                wall, used, result = timed(download_shard, url, dest, fsync=sync)
                assert result.sha256 == digest and result.size == size
                rates["ours" if sync else "ours-nofsync"].append(size / wall / 1e6)
                cpu_per_gb["ours" if sync else "ours-nofsync"].append(used / (size / 1e9))
                dest.unlink()

            for rep in range(args.reps):
                for sync in (False, True):
                    # alternate who goes first: writeback of one run must not bias the other
                    first, second = (
                        (measure_curl, measure_ours)
                        if rep % 2 == 0
                        else (measure_ours, measure_curl)
                    )
                    for measure in (first, second):
                        os.sync()
                        measure(sync)
            cpu_med = {k: statistics.median(v) for k, v in cpu_per_gb.items()}
            med = {k: statistics.median(v) for k, v in rates.items()}

            shard = work / "corpus.jsonl.zst"
            compressed = write_corpus(shard, args.docs)
            bare_rates, our_rates, bare_cpu, our_cpu = [], [], [], []
            for _ in range(args.reps):
                wall, cpu, n = timed(bare_loop, shard)
                assert n == args.docs
                bare_rates.append(n / wall)
                bare_cpu.append(n / cpu)
                wall, cpu, n = timed(feedline_loop, shard)
                assert n == args.docs
                our_rates.append(n / wall)
                our_cpu.append(n / cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    dec_ours, dec_bare = statistics.median(our_rates), statistics.median(bare_rates)
    cpu_ours, cpu_bare = statistics.median(our_cpu), statistics.median(bare_cpu)
    print(f"download: {args.size_mb} MiB from nginx on 127.0.0.1, {args.reps} reps (medians)")
    print(
        f"decode:   {args.docs} docs, {compressed / 1e6:.1f} MB zstd, {args.reps} reps (medians)\n"
    )
    print("| measurement | feedline | baseline | ratio | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| download MB/s, data fsynced (feedline default) vs curl + fsync | {med['ours']:.0f} "
        f"| {med['curl+fsync']:.0f} | {med['ours'] / med['curl+fsync']:.2f}x | >= 0.9x |"
    )
    print(
        f"| download MB/s, page cache only (--no-fsync) vs curl | {med['ours-nofsync']:.0f} "
        f"| {med['curl']:.0f} | {med['ours-nofsync'] / med['curl']:.2f}x | >= 0.9x |"
    )
    print(
        f"| download MB/s, feedline default vs plain curl | {med['ours']:.0f} | {med['curl']:.0f} "
        f"| {med['ours'] / med['curl']:.2f}x | |"
    )
    print(
        f"| zstd->JSONL docs/s wall (stream_jsonl) vs bare zstandard+orjson | {dec_ours:,.0f} "
        f"| {dec_bare:,.0f} | {dec_ours / dec_bare:.2f}x | >= 0.8x |"
    )
    print(
        f"| zstd->JSONL docs per CPU-second | {cpu_ours:,.0f} | {cpu_bare:,.0f} "
        f"| {cpu_ours / cpu_bare:.2f}x | |"
    )
    print(
        f"| download CPU-seconds per GB (feedline incl. sha256 thread) vs curl, fsynced "
        f"| {cpu_med['ours']:.2f} | {cpu_med['curl+fsync']:.2f} "
        f"| {cpu_med['ours'] / cpu_med['curl+fsync']:.2f}x | |"
    )
    print(
        f"| download CPU-seconds per GB, page cache only | {cpu_med['ours-nofsync']:.2f} "
        f"| {cpu_med['curl']:.2f} | {cpu_med['ours-nofsync'] / cpu_med['curl']:.2f}x | |"
    )
    print("\nall download samples MB/s:")
    for key, values in rates.items():
        print(f"  {key:>13}: {[round(x) for x in values]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
