"""Small synthetic corpora for the curation tests."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
from pathlib import Path

import zstandard

from tests import cli
from tests.cli import feedline_argv as feedline_cmd  # noqa: F401  (re-exported for curate tests)

WORDS = ["the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "with", "as", "was", "on", "be", "by", "this", "have", "from", "or", "at", "are", "an", "not", "but", "what", "all", "were", "when", "we", "there", "can", "been", "has", "more", "if", "will", "one", "its", "about", "would"]


def make_text(rng: random.Random, words: int = 60) -> str:
    lines = []
    remaining = words
    while remaining > 0:
        n = min(remaining, rng.randint(3, 15))
        line = " ".join(rng.choice(WORDS) for _ in range(n))
        lines.append(line + rng.choice([".", "", "!", " …"]))
        remaining -= n
    text = "\n".join(lines)
    if rng.random() < 0.2:
        text += f"\nmail me at user{rng.randint(0, 99)}@example.com please\n"
    if rng.random() < 0.1:
        text += " call 555-123-4567 today. é ü 漢字"
    return text


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows)
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_multiframe_zst(path: Path, rows: list[dict], frames: int = 5) -> Path:
    """``rows`` as a ``.jsonl.zst`` of several independent zstd frames (as `zstd` of concatenated
    parts, or a writer flushing frames, makes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows]
    step = -(-len(lines) // frames)
    cctx = zstandard.ZstdCompressor()
    path.write_bytes(b"".join(cctx.compress(b"".join(lines[i : i + step])) for i in range(0, len(lines), step)))
    return path


def cut(path: Path, fraction: float = 0.7) -> None:
    """Keep the first ``fraction`` of the file's bytes, as an interrupted copy does."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def read_jsonl(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def make_corpus(root: Path, files: int = 3, docs: int = 40, seed: int = 0, prefix: str = "shard") -> list[Path]:
    rng = random.Random(seed)
    paths = []
    for f in range(files):
        rows = [
            {"id": f"{prefix}{f}-{i}", "text": make_text(rng, rng.randint(5, 120)), "source": "synthetic",
             "metadata": {"url": f"https://example.com/{f}/{i}"}}
            for i in range(docs)
        ]
        paths.append(write_jsonl(root / "documents" / f"{prefix}_{f:03d}.jsonl.gz", rows))
    return paths


def run_feedline(*args: str, check: bool = True, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The suite's one CLI runner (tests/cli.py), checking the exit by default as curate's tests expect."""
    return cli.run_feedline(*args, check=check, env=env, timeout=timeout)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root (hidden marker folders excluded) -> its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            out[rel] = path.read_bytes()
    return out
