"""Small corpora and a BPE tokenizer trained at test time: nothing is downloaded."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

WORDS = ["robot", "arm", "grasp", "cup", "table", "red", "blue", "green", "move", "slowly", "quickly", "the", "a", "of", "to", "and", "in", "on", "left", "right", "camera", "episode", "frame", "token", "window", "chunk", "shard", "corpus", "train", "loss", "model", "data", "feed", "line"]


def sentences(seed: int, n: int, *, min_words: int = 3, max_words: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) + "."
            for _ in range(n)]


def train_tokenizer(folder: Path, *, vocab_size: int = 300) -> Path:
    """A byte-level BPE tokenizer trained on the test words, with ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(sentences(0, 500), trainer)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def write_docs(path: Path, texts: list[str], *, prefix: str = "d") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = b"".join(json.dumps({"id": f"{prefix}{i}", "text": t, "source": "test"}).encode() + b"\n"
                     for i, t in enumerate(texts))
    path.write_bytes(gzip.compress(lines, mtime=0) if path.suffix == ".gz" else lines)
    return path


def write_corpus(root: Path, shards: int, docs: int, *, seed: int = 1, **kw: int) -> list[Path]:
    return [write_docs(root / "documents" / f"part-{s:02d}.jsonl.gz", sentences(seed + s, docs, **kw),
                       prefix=f"s{s}-") for s in range(shards)]
