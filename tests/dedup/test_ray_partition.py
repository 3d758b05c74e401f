"""Properties of the staged dedup's partitioning and clustering (plain functions, no Ray needed).

The stages run here in-process on real files: stage 1 writes a shard's arrays, stage 2 reads
each partition's slices. The oracle is the one-process view: every pair of documents (with
shingles) sharing a band key, from the engine's own MinHasher and LSHIndex.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.dedup.buckets import band_partition, connected_labels, exact_partition, group_pairs
from feedline.dedup.engine import DedupConfig
from feedline.dedup.lsh import LSHIndex
from feedline.dedup.minhash import MinHasher
from feedline.dedup.stages import Plan, buckets_task, signatures_task

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox"]
CONFIG = DedupConfig(threshold=0.5, num_perm=8, ngram=1, bands=4, rows=2, seed=7)

texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=4).map(" ".join), min_size=1, max_size=30
)


def _one_process_pairs(texts: list[str]) -> set[tuple[int, int]]:
    hasher = MinHasher(CONFIG.num_perm, CONFIG.ngram, CONFIG.seed)
    batch = hasher.shingle_batch(texts)
    keys = LSHIndex(*CONFIG.banding(), CONFIG.seed).band_keys(hasher.signatures_from_shingles(batch))
    nonempty = np.flatnonzero(batch.counts() > 0).tolist()
    return {
        (a, b)
        for a, b in itertools.combinations(nonempty, 2)
        if bool((keys[a] == keys[b]).any())
    }


@settings(max_examples=12, deadline=None)
@given(texts=texts_strategy, partitions=st.integers(1, 5), split=st.integers(0, 30))
def test_partitions_cover_every_band_key_once_and_keep_every_candidate_pair(
    texts: list[str], partitions: int, split: int
) -> None:
    split = min(split, len(texts))
    shards = [texts[:split], texts[split:]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs = []
        for s, shard in enumerate(shards):
            path = root / f"s{s}.jsonl"
            path.write_bytes(b"".join(orjson.dumps({"text": t}) + b"\n" for t in shard))
            inputs.append((str(path), f"s{s}.jsonl.zst"))
        plan = Plan(str(root / "work"), {"test": 1}, str(root / "out"), tuple(inputs), CONFIG, partitions)
        counts = [signatures_task(plan, s)["documents"] for s in range(len(shards))]
        total_entries = 0
        found: set[tuple[int, int]] = set()
        work = plan.work()
        for p in range(partitions):
            marker = buckets_task(plan, p, counts)
            total_entries += marker["band_entries"]
            members = work.load(f"buckets/p{p:04d}/members.npy")
            offsets = work.load(f"buckets/p{p:04d}/group_offsets.npy")
            found |= group_pairs(members, offsets)
        for s in range(len(shards)):  # each entry sits in the slice of its own partition
            bo = work.load(f"sig/s{s:05d}/band_offsets.npy")
            parts = band_partition(
                work.load(f"sig/s{s:05d}/band_band.npy"), work.load(f"sig/s{s:05d}/band_key.npy"), partitions
            )
            assert (parts == np.repeat(np.arange(partitions), np.diff(bo))).all()
            eo = work.load(f"sig/s{s:05d}/exact_offsets.npy")
            eparts = exact_partition(work.load(f"sig/s{s:05d}/exact_key.npy")[:, 0], partitions)
            assert (eparts == np.repeat(np.arange(partitions), np.diff(eo))).all()
    nonempty = sum(1 for t in texts if t.split())
    assert total_entries == nonempty * CONFIG.banding()[0]
    assert found == _one_process_pairs(texts)


def _oracle_components(n: int, edges: list[tuple[int, int]]) -> list[int]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(x) for x in range(n)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    raw=st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=60),
)
def test_array_union_find_matches_a_textbook_union_find(n: int, raw: list[tuple[int, int]]) -> None:
    edges = [(a % n, b % n) for a, b in raw]
    u = np.array([a for a, _ in edges], dtype=np.int64)
    v = np.array([b for _, b in edges], dtype=np.int64)
    assert connected_labels(u, v, n).tolist() == _oracle_components(n, edges)


@settings(max_examples=8, deadline=None)
@given(texts=texts_strategy, partitions=st.integers(1, 4), step=st.integers(1, 7),
       verify=st.sampled_from(["exact", "estimate"]))
def test_stage_files_do_not_depend_on_the_streaming_step(
    texts: list[str], partitions: int, step: int, verify: str
) -> None:
    """Stages 1 and 4 stream a shard ``_SIGNATURE_BATCH`` documents at a time; any step gives the
    same files, byte for byte, as one step over the whole shard (stage 1's per-step runs are
    merged back into partition order, zstd's output ignores how its input is cut)."""
    import dataclasses

    import feedline.dedup.stages as stages

    config = dataclasses.replace(CONFIG, verify=verify)
    outputs: list[dict[str, bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "s0.jsonl"
        path.write_bytes(b"".join(orjson.dumps({"id": i, "text": t}) + b"\n" for i, t in enumerate(texts)))
        for size in (step, 10**6):
            stages._SIGNATURE_BATCH = size
            try:
                work_root, out = root / f"work{size}", root / f"out{size}"
                plan = Plan(str(work_root), {"test": 1}, str(out), ((str(path), "s0.jsonl.zst"),), config, partitions)
                counts = [signatures_task(plan, 0)["documents"]]
                for p in range(partitions):
                    buckets_task(plan, p, counts)
                stages.cluster_task(plan)
                for k in range(partitions):
                    stages.resolve_task(plan, k, counts)
                stages.write_task(plan, 0, counts)
            finally:
                stages._SIGNATURE_BATCH = 1024
            files = {str(p.relative_to(work_root)): p.read_bytes() for p in work_root.rglob("*.npy")}
            files["write"] = (work_root / "write/s00000.jsonl").read_bytes()
            files["shard"] = stages.staged_path(out, "s0.jsonl.zst").read_bytes()  # the driver installs it
            assert not list(work_root.rglob("*.run.npy"))  # the runs are merged and gone
            outputs.append(files)
    assert outputs[0] == outputs[1]
