"""Fixtures of the curation tests: a tiny fastText language-ID model trained at test time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.curate.helpers import WORDS

GERMAN = ["der", "die", "und", "in", "den", "von", "zu", "das", "mit", "sich", "des", "auf", "für", "ist",
          "im", "dem", "nicht", "ein", "eine", "als", "auch", "es", "an", "werden", "aus", "er", "hat",
          "dass", "sie", "nach", "wird", "bei", "einer", "um", "am", "sind", "noch", "wie", "einem", "über"]
FRENCH = ["le", "la", "les", "de", "des", "et", "un", "une", "est", "que", "qui", "dans", "pour", "pas",
          "sur", "au", "avec", "ce", "il", "elle", "nous", "vous", "ils", "sont", "mais", "ou", "donc",
          "car", "très", "plus", "bien", "aussi", "tout", "cette", "son", "sa", "ses", "leur", "fait"]
VOCABULARY = {"en": WORDS, "de": GERMAN, "fr": FRENCH}


def sentence(rng: random.Random, lang: str, words: int) -> str:
    return " ".join(rng.choice(VOCABULARY[lang]) for _ in range(words))


@pytest.fixture(scope="session")
def lid_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A supervised fastText model with ``__label__en/de/fr``, trained on generated sentences:
    the same file format and labels as lid.176.bin, small enough to train in a second."""
    fasttext = pytest.importorskip("fasttext")
    folder = tmp_path_factory.mktemp("lid")
    rng = random.Random(7)
    lines = []
    for _ in range(3000):
        lang = rng.choice(list(VOCABULARY))
        lines.append(f"__label__{lang} {sentence(rng, lang, rng.randint(3, 25))}")
    train = folder / "train.txt"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # thread=10: fastText fills its input matrix's random start in ten blocks, one per training
    # thread, so fewer threads leave part of it as uninitialised memory (garbage, sometimes NaN:
    # "Encountered NaN." in a test run). Ten threads initialise all of it; training stays ~0.2 s.
    model = fasttext.train_supervised(str(train), epoch=5, dim=16, minn=2, maxn=4, bucket=20000, thread=10,
                                      seed=1, verbose=0)
    path = folder / "lid.tiny.bin"
    model.save_model(str(path))
    return path
