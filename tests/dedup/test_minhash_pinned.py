"""Pinned values: shingle hashes, signatures, exact keys, band keys and verdicts for fixed seeds.

Why: the hash family decides which documents count as duplicates, and indexes or manifests
written by one feedline version are read against signatures of the next. Any speed work on
shingling, hashing or banding must reproduce these numbers bit for bit; a change here is a
change of verdicts and needs a new seed or a migration note, not a quiet update of the pins.
"""

from __future__ import annotations

import hashlib

import pytest

from feedline.dedup.engine import DedupConfig, dedup_texts
from feedline.dedup.lsh import LSHIndex
from feedline.dedup.minhash import MinHasher

from .planted_corpus import make_corpus

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank today",
    "a b c",
    "",
    "Ünïcödé wörds ﬁne and more words here to make shingles",
    "one two three four five",
]


def _sha(array) -> str:
    return hashlib.sha256(array.tobytes()).hexdigest()


@pytest.mark.parametrize(
    ("seed", "first_slots", "last_slots", "first_shingles", "band_keys", "digests"),
    [
        (
            1,
            [
                [1607176988, 236915103, 951639417, 183865543],
                [577504448, 2068859102, 1754421808, 1448321077],
                [4294967295, 4294967295, 4294967295, 4294967295],
                [1164331282, 1020121907, 1230220940, 285899473],
                [3198053832, 3765024326, 2758328312, 1306328925],
            ],
            [[122664045, 27428831], [325125081, 1954493517], [4294967295, 4294967295],
             [554646812, 1219187001], [299666417, 3125342069]],
            [2286780032, 3432974919, 3025563143, 354041144, 51667056, 1423025992],
            [1375548241770487378, 15629550143918366497, 11615811476671640796],
            (
                "771c05e498294f257427fd6c36d32cfde5c5c5ac5b50fbe1112abb1782fb88de",
                "43f69b11302097b15765c773dc374666b8d1c3e4ae99b53ee9d387aa4b9b4b13",
                "7bfc4a240d3630830835e04cda761ea72bb038ac3fae75e2821961da480f98c8",
            ),
        ),
        (
            7,
            [
                [386125618, 84672265, 907030840, 943742462],
                [4205257403, 1606810673, 227739052, 3546935761],
                [4294967295, 4294967295, 4294967295, 4294967295],
                [889322230, 66952539, 127063436, 270885624],
                [991810290, 991693566, 2985275157, 2886627074],
            ],
            [[201078653, 83205812], [1596433777, 2506650028], [4294967295, 4294967295],
             [1127941367, 83990026], [1956764988, 105673987]],
            [2899710788, 4153296016, 2823409757, 2437696580, 1562791816, 2006894705],
            [318058112066311479, 14744591528777210691, 17478434608694655950],
            (
                "7a01b14cb54adb22ab23035c2ca39a7559e2ea7b0954378905e33cf413616529",
                "75055dfe7209e9f28dde79215727812e2b83105c1acfa5b5379f324329d64ecf",
                "95a197a69e23038537f9497ff15b1a544b5f95f7e88b1ef2d97716f906570055",
            ),
        ),
    ],
)
def test_signatures_and_band_keys_are_pinned(
    seed, first_slots, last_slots, first_shingles, band_keys, digests
) -> None:
    hasher = MinHasher(num_perm=128, seed=seed)
    batch = hasher.shingle_batch(TEXTS)
    sigs = hasher.signatures_from_shingles(batch)
    keys = LSHIndex(16, 8, seed).band_keys(sigs)
    assert sigs[:, :4].tolist() == first_slots
    assert sigs[:, -2:].tolist() == last_slots
    assert batch.hashes[:6].tolist() == first_shingles
    assert keys[0, :3].tolist() == band_keys
    assert (_sha(sigs), _sha(batch.hashes), _sha(keys)) == digests
    # the exact key does not depend on the seed
    assert batch.exact_keys[:2].tolist() == [
        [1937667186737577904, 4037101220213480988],
        [702534080915961, 17434980921589851640],
    ]
    assert _sha(batch.exact_keys) == (
        "e65c4f76cb0d2198414e7e9a1aeaedcc05c8b93b80b7442227c6088f03ecb52f"
    )


@pytest.mark.parametrize(
    ("verify", "digest", "flagged"),
    [
        ("exact", "45d9b295dd2421a8a46cf39660c82d5cfd13050b38908b3ee02bf14fe512e06f", 77),
        ("estimate", "ffbde884aee32db91ccad59f9bbcb14ec1f4c3c434741c0a8682d93075a7cc69", 80),
    ],
)
def test_verdicts_on_a_planted_corpus_are_pinned(verify: str, digest: str, flagged: int) -> None:
    corpus = make_corpus(300, 120, 30, seed=5, j_range=(0.5, 1.0))
    verdicts = dedup_texts(
        [str(i) for i in range(len(corpus.texts))], corpus.texts, DedupConfig(verify=verify)  # type: ignore[arg-type]
    )
    assert sum(not v.kept for v in verdicts) == flagged
    text = "\n".join(f"{v}|{v.similarity}" for v in verdicts)
    assert hashlib.sha256(text.encode()).hexdigest() == digest
