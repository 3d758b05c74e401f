"""What ``feedline mix``'s progress bar and per-filter counts cost, on a 120k-document corpus.

Both runs mix the same stream in this process, measured in CPU seconds:

* baseline: Dolma's rule with its short cut (stop at the first include that matches and the first
  exclude that matches), no progress callback: the mixer as it was before the counts;
* reported: every include/exclude evaluated on every document (per-filter counts), progress
  batched into a tqdm bar (written to a null stream), the JSON summary written.

``.venv/bin/python bench/mix_report.py [--docs 120000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from feedline.curate import mixer
from feedline.curate.mixconfig import StreamConfig, parse_config

WORDS = [f"w{i}" for i in range(2000)]


def make_corpus(root: Path, docs: int, files: int = 8) -> None:
    rng = random.Random(0)
    per_file = docs // files
    for f in range(files):
        rows, attrs = [], []
        for i in range(per_file):
            n = rng.randint(20, 300)
            text = " ".join(rng.choices(WORDS, k=n))
            rows.append(json.dumps({"id": f"{f}-{i}", "text": text, "source": "bench"}))
            attrs.append(json.dumps({"id": f"{f}-{i}", "attributes": {
                "q__len__words": [[0, len(text), float(n)]],
                "q__pii__doc": [[0, len(text), float(rng.random() < 0.05)]],
                "q__rand__random": [[0, len(text), rng.random()]],
            }}))
        for folder, lines in (("documents", rows), ("attributes/q", attrs)):
            path = root / folder / f"part_{f:02d}.jsonl.gz"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1))


def config(root: Path) -> list[StreamConfig]:
    return parse_config({"streams": [{
        "name": "bench",
        "documents": [str(root / "documents" / "*.jsonl.gz")],
        "attributes": ["q"],
        "filter": {
            "include": ["$.attributes[?(@.q__len__words[0][2] >= 50)]", "$.attributes[?(@.q__rand__random[0][2] < 0.1)]"],
            "exclude": ["$.attributes[?(@.q__pii__doc[0][2] > 0)]", "$.attributes[?(@.q__len__words[0][2] > 280)]",
                        "$.attributes[?(@.q__rand__random[0][2] > 0.95)]"],
        },
        "output": {"path": str(root / "mixed"), "discard_fields": ["attributes"]},
    }]})


def short_cut(row, stream, counts) -> bool:
    """The rule without counts: Dolma's short-circuit evaluation."""
    return mixer.keep(row, stream)


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=120_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="feedline-mixbench-"))
    try:
        make_corpus(root, args.docs)
        streams = config(root)
        counted = mixer.count_filters
        real_summary = mixer.files.write_small

        def baseline() -> None:
            mixer.count_filters = short_cut
            mixer.files.write_small = lambda path, data: None
            try:
                mixer.mix_stream(streams[0])
            finally:
                mixer.count_filters = counted
                mixer.files.write_small = real_summary

        def reported() -> None:
            null = io.StringIO()
            stderr, sys.stderr = sys.stderr, null
            try:
                report = mixer.run_mix(streams, show_progress=True)
            finally:
                sys.stderr = stderr
            assert report.streams[0].documents == args.docs - args.docs % 8

        base, ours = [], []
        for _ in range(args.repeats):  # interleaved, so load changes hit both alike
            base.append(cpu(baseline))
            shutil.rmtree(root / "mixed", ignore_errors=True)
            ours.append(cpu(reported))
            shutil.rmtree(root / "mixed", ignore_errors=True)
        b, o = statistics.median(base), statistics.median(ours)
        docs = args.docs - args.docs % 8
        print(f"documents: {docs:,}; repeats: {args.repeats} (medians of CPU seconds)")
        print(f"  baseline (short-cut rule, no progress, no summary): {b:.2f} CPU-s, {docs / b:,.0f} docs/CPU-s")
        print(f"  reported (every filter counted, progress bar, summary): {o:.2f} CPU-s, {docs / o:,.0f} docs/CPU-s")
        print(f"  reported / baseline: {o / b:.2f}x CPU")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
