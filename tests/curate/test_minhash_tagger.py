from __future__ import annotations

import random
import shutil

from feedline.curate.processor import run_tag
from feedline.curate.runtime import TagJob
from feedline.dedup.engine import Deduplicator

from .helpers import WORDS, read_jsonl, run_feedline, tree_bytes, write_jsonl

KEY = "d__minhash_near_dup_v1__"


def planted_corpus(root, seed=7):
    """3 files; file 1 repeats a doc of file 0 exactly (case changed) and one with 2 % edits."""
    rng = random.Random(seed)

    def text(n=300):
        return " ".join(rng.choice(WORDS) + str(rng.randint(0, 500)) for _ in range(n))

    base = [{"id": f"a{i}", "text": text()} for i in range(30)]
    edited = base[4]["text"].split()
    for j in rng.sample(range(len(edited)), 3):
        edited[j] = "edited" + str(j)
    second = [{"id": f"b{i}", "text": text()} for i in range(30)]
    second[10] = {"id": "b10", "text": base[2]["text"].upper()}
    second[20] = {"id": "b20", "text": " ".join(edited)}
    third = [{"id": f"c{i}", "text": text()} for i in range(10)] + [{"id": "c10", "text": second[5]["text"]}]
    for name, rows in (("p0", base), ("p1", second), ("p2", third)):
        write_jsonl(root / "documents" / f"{name}.jsonl.gz", rows)
    return base, second, third


def test_near_duplicates_against_the_whole_run(tmp_path):
    base, second, third = planted_corpus(tmp_path)
    report = run_tag([str(tmp_path / "documents" / "*.gz")], TagJob(("minhash_near_dup_v1",), experiment="d"))
    assert report.documents == 71
    rows = {r["id"]: r["attributes"] for name in ("p0", "p1", "p2")
            for r in read_jsonl(tmp_path / "attributes" / "d" / f"{name}.jsonl.gz")}
    flagged = {i for i, a in rows.items() if a[KEY + "duplicate"][0][2] == 1.0}
    assert flagged == {"b10", "b20", "c10"}
    assert rows["b10"][KEY + "exact_duplicate"][0][2] == 1.0
    assert 0.8 <= rows["b20"][KEY + "near_duplicate"][0][2] < 1.0
    assert rows["b20"][KEY + "exact_duplicate"][0][2] == 0.0
    # the same verdicts as the engine gives on the run's documents in file order
    with Deduplicator() as dedup:
        engine = dedup.add_batch([d["id"] for d in base + second + third], [d["text"] for d in base + second + third])
    assert {d["id"] for d, v in zip(base + second + third, engine, strict=True) if not v.kept} == flagged


def test_minhash_output_independent_of_processes_and_resume(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    planted_corpus(one)
    shutil.copytree(one / "documents", two / "documents")
    args = ("--taggers", "minhash_near_dup_v1", "char_length_v1", "--experiment", "d")
    job = TagJob(("minhash_near_dup_v1", "char_length_v1"), experiment="d")
    run_tag([str(one / "documents" / "*.gz")], job)
    run_feedline("tag", "--documents", str(two / "documents" / "*.gz"), *args, "--processes", "2")
    assert tree_bytes(one / "attributes") == tree_bytes(two / "attributes")
    # a new file changes the corpus: old markers no longer count, everything is re-tagged
    write_jsonl(two / "documents" / "p3.jsonl.gz", [{"id": "z", "text": read_jsonl(two / "documents" / "p0.jsonl.gz")[0]["text"]}])
    assert len(run_tag([str(two / "documents" / "*.gz")], job).processed) == 4
    (z,) = read_jsonl(two / "attributes" / "d" / "p3.jsonl.gz")
    assert z["attributes"][KEY + "duplicate"] == [[0, len(read_jsonl(two / "documents" / "p3.jsonl.gz")[0]["text"]), 1.0]]
