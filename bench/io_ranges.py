"""Random range reads over HTTP: feedline's read_ranges vs fsspec's cat_ranges vs sequential reads.

Serves a large random file with nginx on 127.0.0.1 (the same server the tests use), then reads the
same random ranges three ways, a few repetitions each, and prints medians and ratios from this run.

    .venv/bin/python bench/io_ranges.py [--size-mb 1024] [--ranges 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fsspec  # noqa: E402
from tests.servers import run_nginx  # noqa: E402

from feedline.io import open_store  # noqa: E402


def make_file(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        for i in range(size >> 20):
            handle.write(block[i % 997 :] + block[: i % 997])


def sequential(url: str, ranges: list[tuple[int, int]]) -> int:
    """One keep-alive connection, one range at a time: what a curl loop does at best."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    path = "/" + url.split("//")[1].split("/", 1)[1]
    conn = http.client.HTTPConnection(host, int(port))
    total = 0
    for start, end in ranges:
        conn.request("GET", path, headers={"Range": f"bytes={start}-{end - 1}"})
        total += len(conn.getresponse().read())
    conn.close()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--ranges", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    rng = random.Random(0)
    size = args.size_mb << 20
    with tempfile.TemporaryDirectory() as tmp, run_nginx(Path(tmp)) as nginx:
        make_file(nginx.root / "big.bin", size)
        url = f"{nginx.url}/big.bin"
        stores = {
            f"feedline read_ranges x{n}": open_store(nginx.url, max_connections=n)
            for n in sorted({1, 4, args.connections})
        }
        fs = fsspec.filesystem("http")
        results: dict[str, list[float]] = {name: [] for name in stores}
        results.update({"fsspec cat_ranges": [], "sequential keep-alive": []})
        for _ in range(args.repeats):
            ranges = []
            for _ in range(args.ranges):
                length = rng.randint(4 << 10, 256 << 10)
                start = rng.randrange(0, size - length)
                ranges.append((start, start + length))
            nbytes = sum(e - s for s, e in ranges)
            for name, store in stores.items():
                began = time.perf_counter()
                got = store.read_ranges("big.bin", ranges)
                results[name].append(time.perf_counter() - began)
                assert sum(map(len, got)) == nbytes
            began = time.perf_counter()
            got = fs.cat_ranges([url] * len(ranges), [s for s, _ in ranges], [e for _, e in ranges])
            results["fsspec cat_ranges"].append(time.perf_counter() - began)
            assert sum(map(len, got)) == nbytes
            began = time.perf_counter()
            assert sequential(url, ranges) == nbytes
            results["sequential keep-alive"].append(time.perf_counter() - began)
        for store in stores.values():
            store.close()
    base = statistics.median(results["sequential keep-alive"])
    print(f"{args.ranges} random ranges of 4-256 KiB ({nbytes / 1e6:.0f} MB) over a {args.size_mb} MiB file, "
          f"nginx on 127.0.0.1, {os.cpu_count()} cores, median of {args.repeats}")
    print(f"{'method':<28} {'median s':>9} {'MB/s':>8} {'vs sequential':>14}")
    for name, times in results.items():
        med = statistics.median(times)
        print(f"{name:<28} {med:9.3f} {nbytes / med / 1e6:8.0f} {base / med:13.2f}x")


if __name__ == "__main__":
    main()
