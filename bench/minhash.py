"""Near-duplicate dedup: feedline vs datasketch (MinHash + MinHashLSH) vs rensa, same corpus.

    .venv/bin/python bench/minhash.py [--docs 50000] [--repeat 3] [--threshold 0.8]
    .venv/bin/python bench/minhash.py --impl feedline --src old=../old/src --repeat 5

``--src LABEL=DIR`` adds ``feedline[LABEL]``: the engine imported from DIR (e.g. ``git archive``
of an older commit's ``src``), to compare two versions side by side in one run. Repeats go
round every implementation in turn, so load changes hit all of them alike.

Corpus: ~2 KB documents with a Zipf-like vocabulary; 88 % originals, 8 % planted near
duplicates (word substitutions, target J uniform in [0.5, 1.0]) and 4 % case/whitespace copies,
each placed after its original (tests/dedup/planted_corpus.py). Every pipeline runs end to end
in its own fresh process: exact dedup of normalised text, word 5-gram shingling, signatures, LSH
query + insert in stream order (first occurrence wins), candidate check. Reported: documents per
CPU-second (median of --repeat runs), RSS growth while the index is alive, scaled to 100k
documents, and recall / precision against the oracle Jaccard of every planted pair (recall: the
later document of a planted pair with J >= x is flagged; precision: a flagged pair's oracle J >=
threshold).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NUM_PERM = 128
NGRAM = 5
IMPLS = ["feedline", "feedline-estimate", "datasketch", "datasketch-16x8", "rensa-16x8"]


def _rss() -> int:
    """Resident bytes after returning freed heap memory to the OS (so transients don't count)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _shingles(text: str) -> set[str]:
    words = text.lower().split()
    if len(words) < NGRAM:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


def _exact_key(text: str) -> bytes:
    return hashlib.blake2b(" ".join(text.lower().split()).encode(), digest_size=16).digest()


class Pipeline:
    """One implementation fed the stream in parts; ``flagged``: later index -> earlier index."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.flagged: dict[int, int] = {}
        self.exact: list[int] = []
        self.indexed = 0
        self.index_bytes: int | None = None

    def feed(self, texts: list[str], offset: int) -> None:
        raise NotImplementedError


class Feedline(Pipeline):
    def __init__(self, threshold: float, verify: str) -> None:
        super().__init__(threshold)
        from feedline.dedup.engine import DedupConfig, Deduplicator

        self.dedup = Deduplicator(DedupConfig(threshold=threshold, verify=verify))  # type: ignore[arg-type]

    def feed(self, texts: list[str], offset: int) -> None:
        ids = [str(offset + i) for i in range(len(texts))]
        for i, v in enumerate(self.dedup.add_batch(ids, texts), offset):
            if v.kind == "near_dup":
                self.flagged[i] = int(v.of)  # type: ignore[arg-type]
            elif v.kind == "exact_dup":
                self.exact.append(i)
        self.indexed = self.dedup.lsh.index.rows
        self.index_bytes = self.dedup.index_nbytes


class Baseline(Pipeline):
    """The usual per-document loop: exact key, shingles, MinHash, LSH query, check, insert."""

    def __init__(self, threshold: float) -> None:
        super().__init__(threshold)
        self.seen: set[bytes] = set()
        self.kept: dict[int, object] = {}

    def minhash(self, shingles: set[str]) -> object:
        raise NotImplementedError

    def feed(self, texts: list[str], offset: int) -> None:
        lsh, kept, threshold = self.lsh, self.kept, self.threshold
        for i, text in enumerate(texts, offset):
            key = _exact_key(text)
            if key in self.seen:
                self.exact.append(i)
                continue
            self.seen.add(key)
            m = self.minhash(_shingles(text))
            match = [c for c in sorted(lsh.query(m)) if m.jaccard(kept[c]) >= threshold]
            if match:
                self.flagged[i] = match[0]
            else:
                lsh.insert(i, m)
                kept[i] = m
                self.indexed += 1


class Datasketch(Baseline):
    def __init__(self, threshold: float, bands: int | None) -> None:
        super().__init__(threshold)
        from datasketch import MinHash, MinHashLSH

        params = {"params": (bands, NUM_PERM // bands)} if bands else {}
        self.lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM, **params)
        self._minhash = MinHash
        # Build the permutations once and share them, as datasketch's docs advise for many
        # documents; building them per MinHash (seed=1 every time) costs ~0.25 ms per document
        # and gives the same signatures.
        template = MinHash(num_perm=NUM_PERM, seed=1)
        self._permutations, self._scheme = template.permutations, template.scheme

    def minhash(self, shingles: set[str]) -> object:
        m = self._minhash(
            num_perm=NUM_PERM, seed=1, permutations=self._permutations, scheme=self._scheme
        )
        m.update_batch([s.encode() for s in shingles])
        return m


class Rensa(Baseline):
    def __init__(self, threshold: float) -> None:
        super().__init__(threshold)
        from rensa import RMinHash, RMinHashLSH

        self.lsh = RMinHashLSH(threshold=threshold, num_perm=NUM_PERM, num_bands=16)
        self._minhash = RMinHash

    def minhash(self, shingles: set[str]) -> object:
        m = self._minhash(num_perm=NUM_PERM, seed=42)
        m.update(list(shingles))
        return m


def make_pipeline(impl: str, threshold: float) -> Pipeline:
    if impl == "feedline" or impl.startswith("feedline["):
        return Feedline(threshold, "exact")
    if impl == "feedline-estimate":
        return Feedline(threshold, "estimate")
    if impl == "datasketch":
        return Datasketch(threshold, None)
    if impl == "datasketch-16x8":
        return Datasketch(threshold, 16)
    if impl == "rensa-16x8":
        return Rensa(threshold)
    raise SystemExit(f"unknown implementation {impl}")


def worker(impl: str, corpus_path: str, threshold: float, src: str | None) -> None:
    """Feed the first half, read RSS, feed the second half, read RSS: the difference is the
    marginal memory per indexed document (fixed costs and warm-up cancel out)."""
    if src:
        sys.path.insert(0, src)
    texts = json.loads(Path(corpus_path).read_text())["texts"]
    half = len(texts) // 2
    cpu0, wall0 = time.process_time(), time.perf_counter()
    pipeline = make_pipeline(impl, threshold)
    pipeline.feed(texts[:half], 0)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    rss_half, indexed_half = _rss(), pipeline.indexed
    cpu2, wall2 = time.process_time(), time.perf_counter()
    pipeline.feed(texts[half:], half)
    cpu3, wall3 = time.process_time(), time.perf_counter()
    rss_full = _rss()
    result = {
        "cpu_s": (cpu1 - cpu0) + (cpu3 - cpu2),
        "wall_s": (wall1 - wall0) + (wall3 - wall2),
        "bytes_per_doc": (rss_full - rss_half) / max(pipeline.indexed - indexed_half, 1),
        "indexed": pipeline.indexed,
        "flagged": pipeline.flagged,
        "exact": pipeline.exact,
        "index_bytes": pipeline.index_bytes,
    }
    sys.stdout.write(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--impl", action="append", help="run only these (default: all)")
    parser.add_argument("--src", action="append", default=[], metavar="LABEL=DIR",
                        help="also run the engine imported from DIR, as feedline[LABEL]")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--worker-src", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.corpus, args.threshold, args.worker_src)
        return
    sources = dict(item.split("=", 1) for item in args.src)
    impls = list(args.impl or IMPLS) + [f"feedline[{label}]" for label in sources]

    from tests.dedup.planted_corpus import make_corpus, oracle_jaccard

    n_near, n_exact = int(args.docs * 0.08), int(args.docs * 0.04)
    t0 = time.perf_counter()
    corpus = make_corpus(args.docs - n_near - n_exact, n_near, n_exact, seed=2026)
    avg = sum(len(t.encode()) for t in corpus.texts) / len(corpus.texts)
    print(
        f"corpus: {len(corpus.texts)} docs, {avg:.0f} B avg, {n_near} near pairs, "
        f"{n_exact} exact copies ({time.perf_counter() - t0:.0f} s to generate)",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path = Path(tmp) / "corpus.json"
        corpus_path.write_text(json.dumps({"texts": corpus.texts}))
        runs_of: dict[str, list[dict]] = {impl: [] for impl in impls}
        for _ in range(args.repeat):
            for impl in impls:
                label = impl[len("feedline[") : -1] if impl.startswith("feedline[") else None
                extra = ["--worker-src", str(Path(sources[label]).resolve())] if label else []
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        impl,
                        "--corpus",
                        str(corpus_path),
                        "--threshold",
                        str(args.threshold),
                        *extra,
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs_of[impl].append(json.loads(out))
                print(f"  {impl}: {runs_of[impl][-1]['cpu_s']:.2f} CPU-s", flush=True)
        rows = list(runs_of.items())

    # quality: the flagged pairs of the last run (identical across runs: all are seeded)
    def quality(flagged: dict[str, int], exact: list[int]) -> dict[str, float]:
        pairs = {int(k): v for k, v in flagged.items()}
        exact = set(exact)
        cache: dict[tuple[int, int], float] = {}

        def jac(a: int, b: int) -> float:
            if (a, b) not in cache:
                cache[(a, b)] = oracle_jaccard(corpus.texts[a], corpus.texts[b])
            return cache[(a, b)]

        correct = sum(jac(i, j) >= args.threshold for i, j in pairs.items())
        out = {"precision": correct / max(len(pairs), 1)}
        for name, lo, hi in (("r80_85", 0.8, 0.85), ("r85", 0.85, 1.01), ("r90", 0.9, 1.01)):
            truth = [b for _a, b, j in corpus.near_pairs if lo <= j < hi]
            out[name] = sum(b in pairs or b in exact for b in truth) / max(len(truth), 1)
        return out

    n = len(corpus.texts)
    base_rate = None
    print()
    print(
        "| implementation | docs / CPU-s (median) | vs datasketch | recall J∈[0.80,0.85) | recall J≥0.85 "
        "| recall J≥0.9 | precision | marginal RSS / 100k indexed docs | index arrays / 100k |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results = []
    for impl, runs in rows:
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rate = n / cpu
        if impl == "datasketch":
            base_rate = rate
        q = quality(runs[-1]["flagged"], runs[-1]["exact"])
        rss = statistics.median(r["bytes_per_doc"] for r in runs) * 100_000
        ib = runs[-1]["index_bytes"]
        results.append((impl, rate, q, rss, ib, runs[-1]["indexed"]))
    for impl, rate, q, rss, ib, indexed in results:
        ratio = f"{rate / base_rate:.1f}×" if base_rate else "-"
        # per document indexed by this row's implementation, not the last one printed
        idx = f"{ib / indexed * 100_000 / 1e6:.1f} MB" if ib else "-"
        print(
            f"| {impl} | {rate:,.0f} | {ratio} | {q['r80_85']:.3f} | {q['r85']:.4f} | {q['r90']:.4f} "
            f"| {q['precision']:.4f} | {rss / 1e6:.0f} MB | {idx} |"
        )


if __name__ == "__main__":
    main()
