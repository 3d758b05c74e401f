"""Pinned values: shingle hashes, signatures, exact keys, band keys and verdicts for fixed seeds.

Why: the hash family decides which documents count as duplicates, and indexes or manifests
written by one feedline version are read against signatures of the next. Any speed work on
shingling, hashing or banding must reproduce these numbers bit for bit; a change here is a
change of verdicts and needs a new seed or a migration note, not a quiet update of the pins.

Pins last changed with the move to 8-byte-chunk word hashes and one-permutation MinHash with
optimal densification (docs/benchmarks.md, "MinHash dedup", has the recall and precision
measured before and after). ``minhash.SIGNATURE_SCHEME`` names the definitions; a staged work
dir records it, so one written under older definitions is refused instead of resumed.
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
                [713413288, 2116758042, 2116758042, 3682156305],
                [122088213, 122088213, 122088213, 122088213],
                [4294967295, 4294967295, 4294967295, 4294967295],
                [543521060, 1028141260, 3226527615, 2924793421],
                [3648443508, 3648443508, 3648443508, 3648443508],
            ],
            [[2267012646, 2267012646], [122088213, 122088213], [4294967295, 4294967295],
             [1028141260, 3226527615], [3648443508, 3648443508]],
            [602285018, 1676224089, 140585057, 565023718, 235948402, 581367989],
            [12555499370772623186, 18441344666094476804, 1174789409356161226],
            (
                "092fd0d55a6465329ea9d6924f42008d2a37ef3095eebdd6b6f599aaf269a401",
                "4f874ea9054da0ca618ae2ec07f9000cea355e88d179bf2ad751f3807dc342ca",
                "3811a8c5a17ded5d8447fac0eddf3ce4c5ead38f7b2383ed740a210ef86c4f06",
            ),
        ),
        (
            7,
            [
                [294717033, 233963116, 3297839864, 294717033],
                [1074546416, 1074546416, 1074546416, 1074546416],
                [4294967295, 4294967295, 4294967295, 4294967295],
                [2209086547, 2769842306, 2769842306, 1857024113],
                [2611446114, 2611446114, 2611446114, 2611446114],
            ],
            [[294717033, 2600297063], [1074546416, 1074546416], [4294967295, 4294967295],
             [2769842306, 1857024113], [2611446114, 2611446114]],
            [2210035035, 789868309, 3658940311, 535185145, 3804775620, 1589550746],
            [1333533828670952120, 7100692920780802220, 334046170600892961],
            (
                "4d856105fb51a4929957917fd885bb9fc4f5a9792fb334603937fdbebf8a0ed9",
                "1c1f299c59470434235c521cb12ecaabceb12be7318e4e7c9d72d860ecb321a1",
                "d7eee06252d2da096828ba1b99cc89b0521fd2b65e51afad97a5ccd4958bf15d",
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
        [3549078234748442668, 17886908020787776537],
        [10791543139947667009, 372043352798784575],
    ]
    assert _sha(batch.exact_keys) == (
        "58caf5626a9e049d11a6ba3f6f5a1ea478c4eea305bf1ff25d9f7f697e823e7c"
    )


@pytest.mark.parametrize(
    ("verify", "digest", "flagged"),
    [
        ("exact", "45d9b295dd2421a8a46cf39660c82d5cfd13050b38908b3ee02bf14fe512e06f", 77),
        ("estimate", "e7956a84c6696b58c70ec5256ed842fdfd34a9e1d49b51d9ab69653ef3fcfd26", 77),
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
