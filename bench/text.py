"""Text into training: `feedline tokenize` against datatrove's DocumentTokenizer, and TokenDataset
against a bare numpy memmap reader of the same windows in the same order.

    .venv/bin/python bench/text.py [--docs 20000] [--seq-len 1024] [--repeats 3] [--copies 8]

1. A corpus of --docs documents (4 gzip shards, ~1.5k characters each, Zipf vocabulary) and a
   byte-level BPE tokenizer of 8,192 ids trained on it with `tokenizers` (nothing downloaded).
2. Tokenize: documents per CPU-second (user + system of the command and its children, Rayon's
   encode threads included) of `feedline tokenize --processes 1` and of datatrove 0.10.1's
   DocumentTokenizer (JsonlReader, one task, no shuffle) from .venv-datatrove (`make venv-datatrove`;
   without it that row is skipped, saying so). The two outputs are compared byte for byte.
3. Windows/s of TokenDataset(seq_len) from the local folder and over nginx, against the ceiling:
   an IterableDataset that cuts the same windows from np.memmap in the same order (each worker the
   windows TokenDataset's worker of that number yields, in its order). Both in process (the reader
   alone) and through DataLoader(batch_size=16, num_workers=2) (what a training loop sees: collate
   and worker IPC included), one epoch each, median of --repeats. Peak RSS (VmHWM) per worker.
4. The same on the corpus --copies times over (default 8): with 60,000 documents the corpus is
   28 chunks, fewer than one pool, so nearly every chunk is needed within the first windows and
   the epoch is mostly its start (fetching all of it); the copies show the steady state a
   training corpus, many pools long, runs in.

5. What a window holds (`--fields`, on by default): windows/s with `positions`, `sequence_id`,
   `cu_seqlens`, `loss_mask` (with `mask_after_eos`) and `ignore_index` against plain windows,
   locally and over nginx, in process and through the DataLoader (goal: at most 10 % slower over
   nginx through the DataLoader); and `packing="best_fit"` (pad, crop) rows/s against datatrove's
   cut, with the tokens each wastes (padded, dropped) per epoch. `--fields-only` skips 2-4.

Ratios are computed against baselines measured in the same run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does
DATATROVE = Path(os.environ.get("FEEDLINE_DATATROVE_PYTHON", ROOT / ".venv-datatrove" / "bin" / "python"))
ORACLE = ROOT / "tests" / "text" / "datatrove_oracle.py"


def make_corpus(root: Path, docs: int, shards: int = 4, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "der", "ple", "an", "tor", "el", "qu", "is"]
    vocab = np.array(["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(20000)])
    weights = 1.0 / np.arange(1, vocab.size + 1)
    weights /= weights.sum()
    texts = []
    (root / "documents").mkdir(parents=True, exist_ok=True)
    per = docs // shards
    for s in range(shards):
        lines = []
        for i in range(per):
            words = vocab[rng.choice(vocab.size, size=int(rng.integers(120, 360)), p=weights)]
            text = " ".join(words.tolist()) + "."
            texts.append(text)
            lines.append(json.dumps({"id": f"{s}-{i}", "text": text}))
        (root / "documents" / f"part-{s}.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), 6, mtime=0))
    return texts


def train_tokenizer(texts: list[str], path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts[:5000], trainer)
    tokenizer.save(str(path))


def child_cpu(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds of the command and its children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(argv[:4])} failed:\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def bench_tokenize(work: Path, docs: int, repeats: int) -> Path:
    tokenizer = work / "tokenizer.json"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    rows = {}
    out = work / "tokens"
    runs = []
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(child_cpu([sys.executable, "-m", "feedline", "tokenize", str(work / "documents"), "--tokenizer",
                               str(tokenizer), "--out", str(out), "--processes", "1"], env))
    rows["feedline tokenize"] = runs
    if DATATROVE.exists():
        runs = []
        for r in range(repeats):
            dt_out = work / f"dt-{r}"
            shutil.rmtree(dt_out, ignore_errors=True)
            runs.append(child_cpu([str(DATATROVE), str(ORACLE), "bench", str(work / "documents"), str(tokenizer),
                                   str(dt_out)]))
        rows["datatrove DocumentTokenizer"] = runs
        ours = b"".join((out / f"part-{s}.ds").read_bytes() for s in range(4))
        (theirs,) = list((work / "dt-0").glob("*.ds"))
        same = ours == theirs.read_bytes()
    else:
        print(f"  datatrove: skipped, no side venv at {DATATROVE} (make venv-datatrove builds it)")
        same = None
    print(f"\n## tokenize: {docs:,} documents, 4 shards, BPE 8,192 ids (median of {repeats})")
    print("| tokenizer | CPU s | wall s | docs / CPU-s |\n|---|---|---|---|")
    rates = {}
    for name, runs in rows.items():
        cpu, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        rates[name] = docs / cpu
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {docs / cpu:,.0f} |")
    if len(rates) == 2:
        print(f"\nfeedline / datatrove docs per CPU-second: {rates['feedline tokenize'] / rates['datatrove DocumentTokenizer']:.2f}x"
              f" (goal >= 1.0); datatrove's tokens are feedline's byte for byte: {same}")
    return out


class MemmapWindows(__import__("torch").utils.data.IterableDataset):
    """The ceiling: the same windows from np.memmap, each worker in TokenDataset's order."""

    def __init__(self, folder: Path, names: list[str], span: int, orders: list[np.ndarray]) -> None:
        self.paths = [str(folder / n) for n in names]
        self.span, self.orders = span, orders

    def __iter__(self):
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        files = [np.memmap(p, dtype="<u2", mode="r") for p in self.paths]
        span = self.span
        for f, w in self.orders[0 if info is None else info.id].tolist():
            yield {"input_ids": torch.from_numpy(files[f][w * span : (w + 1) * span].astype(np.int64))}


def worker_orders(ds, num_workers: int) -> list[np.ndarray]:
    """Per DataLoader worker, the (file, window) pairs TokenDataset's worker yields, in order."""
    from feedline.streaming.schedule.plan import plan_shards_arrays

    due = ds.units.epoch(ds.epoch)
    plan = plan_shards_arrays(due.lengths, world_size=1, num_workers=num_workers, seed=ds.seed, epoch=ds.epoch).parts[0]
    table = ds.tables[0]
    out = []
    for part, order in enumerate(plan):
        pool = ds.pool_maker(order, epoch=ds.epoch, rank=0, part=part, num_workers=num_workers, remainder=due)
        units, windows = pool.take(pool.anchors_remaining)
        out.append(np.stack([table.file[units], table.first[units] + windows], axis=1))
    return out


class PeakRss:
    """VmHWM of this process's children (the DataLoader workers), polled while they run."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.05):
            try:
                kids = Path(f"/proc/{me}/task/{me}/children").read_text().split()
            except OSError:
                continue
            for pid in map(int, kids):
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak[pid] = max(self.peak.get(pid, 0), int(line.split()[1]) * 1024)
                except OSError:
                    pass

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> float:
        return max(self.peak.values(), default=0) / 2**20


def epoch_rate(dataset, loader_workers: int | None, track: bool) -> tuple[float, float]:
    from torch.utils.data import DataLoader

    with PeakRss() as rss:
        started = time.perf_counter()
        if loader_workers is None:
            n = sum(1 for _ in dataset)
        else:
            loader = DataLoader(dataset, batch_size=16, num_workers=loader_workers)
            batches = dataset.track(loader) if track else loader
            n = sum(len(b["input_ids"]) for b in batches)
        elapsed = time.perf_counter() - started
    return n / elapsed, rss.mib()


def replicate(tokens: Path, copies: int, dest: Path) -> Path:
    """The tokenized corpus ``copies`` times over (files renamed, one manifest listing them all):
    a corpus many times the pool, whose epoch is mostly steady state rather than its start."""
    manifest = json.loads((tokens / "manifest.json").read_text())
    shards = []
    dest.mkdir(parents=True)
    for copy in range(copies):
        for shard in manifest["shards"]:
            name = f"c{copy}-{shard['path']}"
            for ext in ("", ".index", ".metadata"):
                shutil.copyfile(tokens / (shard["path"] + ext), dest / (name + ext))
            shards.append({**shard, "path": name})
    manifest.update(shards=shards, tokens=manifest["tokens"] * copies, documents=manifest["documents"] * copies)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dest


def bench_dataset(tokens: Path, seq_len: int, repeats: int, copies: int = 1) -> None:
    import torch
    from tests.servers import run_nginx

    from feedline.text import TokenDataset

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, run_nginx(Path(tmp)) as nginx:
        if copies > 1:
            tokens = replicate(tokens, copies, Path(tmp) / "replicated")
        shutil.copytree(tokens, Path(nginx.root) / "tokens")
        sources = {"local folder": str(tokens), "nginx": f"{nginx.url}/tokens"}
        ds = TokenDataset(str(tokens), seq_len)
        names, span = ds.corpora[0].names, seq_len + 1
        size = f"the corpus {copies} times over, " if copies > 1 else ""
        print(f"\n## TokenDataset: {size}{ds.windows:,} windows of {span} tokens "
              f"({sum(ds.corpora[0].tokens.tolist()) * ds.corpora[0].token_bytes / 2**20:,.0f} MiB), chunks of "
              f"{ds.chunk_windows} windows (median of {repeats}, one epoch each)")
        print("| where | reader | TokenDataset windows/s | memmap windows/s | ratio | peak RSS per worker (memmap's) |")
        print("|---|---|---|---|---|---|")
        for where, root in sources.items():
            for label, workers in (("in process", None), ("DataLoader, 2 workers, batch 16", 2)):
                ours, ceiling, rss, rss_memmap = [], [], [], []
                for _ in range(repeats):
                    reader = TokenDataset(root, seq_len)
                    rate, peak = epoch_rate(reader, workers, track=workers is not None)
                    ours.append(rate)
                    rss.append(peak)
                    memmap = MemmapWindows(tokens, names, span, worker_orders(reader, workers or 0))
                    rate, peak = epoch_rate(memmap, workers, track=False)
                    ceiling.append(rate)
                    rss_memmap.append(peak)
                a, b = statistics.median(ours), statistics.median(ceiling)
                memory = f"{max(rss):.0f} MiB ({max(rss_memmap):.0f} MiB)" if workers else "-"
                print(f"| {where} | {label} | {a:,.0f} | {b:,.0f} | {a / b:.2f}x | {memory} |")


FIELDS = dict(labels=True, return_positions=True, return_sequence_id=True, return_cu_seqlens=True,
              return_loss_mask=True, mask_after_eos=True, ignore_index=-100)


def bench_fields(tokens: Path, seq_len: int, repeats: int) -> None:
    import torch
    from tests.servers import run_nginx

    from feedline.text import TokenDataset

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, run_nginx(Path(tmp)) as nginx:
        shutil.copytree(tokens, Path(nginx.root) / "tokens")
        sources = {"local folder": str(tokens), "nginx": f"{nginx.url}/tokens"}
        span = seq_len + 1
        cut = TokenDataset(str(tokens), seq_len)
        total = int(cut.corpora[0].tokens.sum())
        print(f"\n## What a window holds: {cut.windows:,} windows of {span} tokens (median of {repeats})")
        print("| where | reader | plain windows/s | + boundaries + loss mask | ratio | best_fit pad rows/s | "
              "ratio | best_fit crop rows/s | ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for where, root in sources.items():
            for label, workers in (("in process", None), ("DataLoader, 2 workers, batch 16", 2)):
                rates: dict[str, list[float]] = {"plain": [], "fields": [], "pad": [], "crop": []}
                for _ in range(repeats):
                    for name, options in (("plain", {"labels": True}), ("fields", FIELDS),
                                          ("pad", {"labels": True, "ignore_index": -100, "packing": "best_fit"}),
                                          ("crop", {"labels": True, "packing": "best_fit", "remainder": "crop"})):
                        rates[name].append(epoch_rate(TokenDataset(root, seq_len, **options), workers,
                                                      track=workers is not None)[0])
                m = {k: statistics.median(v) for k, v in rates.items()}
                print(f"| {where} | {label} | {m['plain']:,.0f} | {m['fields']:,.0f} | {m['fields'] / m['plain']:.2f}x | "
                      f"{m['pad']:,.0f} | {m['pad'] / m['plain']:.2f}x | {m['crop']:,.0f} | {m['crop'] / m['plain']:.2f}x |")
        print("\n| packing | rows an epoch | tokens padded | tokens dropped |\n|---|---|---|---|")
        print(f"| cut (datatrove's) | {cut.windows:,} | 0 | {total - cut.windows * span:,} "
              f"({(total - cut.windows * span) / total:.2%}, the files' tails) |")
        for remainder in ("pad", "crop"):
            ds = TokenDataset(str(tokens), seq_len, packing="best_fit", remainder=remainder, labels=True,
                              ignore_index=-100)
            st = ds.packing_stats(0)
            dropped = st["dropped"] + st["dropped_tails"]
            print(f"| best_fit, {remainder} | {st['rows']:,} | {st['padded']:,} ({st['padded'] / (st['rows'] * span):.2%} "
                  f"of the rows) | {dropped:,} ({dropped / total:.2%} of the corpus) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=8,
                        help="also measure the readers on the corpus this many times over (0: not)")
    parser.add_argument("--fields", action=argparse.BooleanOptionalAction, default=True,
                        help="measure what a window holds and best_fit packing (section 5)")
    parser.add_argument("--fields-only", action="store_true", help="tokenize once and run section 5 alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        texts = make_corpus(work, args.docs)
        train_tokenizer(texts, work / "tokenizer.json")
        tokens = bench_tokenize(work, args.docs, 1 if args.fields_only else args.repeats)
        if not args.fields_only:
            bench_dataset(tokens, args.seq_len, args.repeats)
            if args.copies > 1:
                bench_dataset(tokens, args.seq_len, args.repeats, args.copies)
        if args.fields or args.fields_only:
            bench_fields(tokens, args.seq_len, args.repeats)


if __name__ == "__main__":
    main()
