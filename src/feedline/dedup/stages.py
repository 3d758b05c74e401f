"""Dedup as four stages of independent tasks over files, for executors that spread them (Ray).

Why staged: the one-process engine holds every kept document's band keys in one process; at a
billion documents that is ~200 GB. Here no task holds the whole index, and every task reads and
writes only files in the work dir (:mod:`feedline.dedup.workdir`), so any scheduler can run
them, a killed run resumes task by task, and results equal the engine's document for document:

1. **signatures** (one task per input shard, streamed ``_SIGNATURE_BATCH`` documents at a
   time so memory does not grow with the shard): the engine's own shingling, MinHash and band
   keys (:class:`~feedline.dedup.minhash.MinHasher`, :meth:`~feedline.dedup.lsh.LSHIndex.band_keys`,
   same seed, so bit-identical), written as arrays ordered by partition: band keys of documents
   with shingles, 128-bit exact keys, document ids, and what verification needs (raw shingle
   hashes for ``verify="exact"``, 16-bit signature slices for ``"estimate"``).
2. **buckets** (one task per partition): a band key belongs to the partition of its
   ``(band, key range)`` cell, an exact key to the partition of its key range, so each key is in
   exactly one partition (the array kernels are :mod:`feedline.dedup.buckets`). A task reads its slice of every shard, sorts, and writes the groups of
   documents sharing a band key (candidate pairs: every pair within a group) and the exact
   duplicates (every later copy of a key, pointing at its first occurrence).
3. **cluster** (one task, like datatrove's cluster step, then one **resolve** task per cluster
   partition): exact duplicates leave the groups (the engine never indexes them); a union-find
   over the groups gives connected clusters; each resolve task takes whole clusters and replays
   the engine's rule inside each in document order: a document is a near duplicate of the
   earliest *kept* earlier candidate whose exact Jaccard (or estimate) reaches the threshold,
   otherwise kept. Plain union-find would drop a whole chain A~B~C, where the engine keeps C
   when C is not similar to A; candidates are verified lazily, so only the pairs the engine
   checks are checked.
4. **write** (one task per input shard): verdicts of the shard's documents, the kept documents
   re-read from the input and written by :mod:`feedline.dedup.shards`, as ``feedline dedup``
   writes them, and the shard's verdict lines, both streamed; the driver joins those into ``verdicts.jsonl`` and
   ``dedup.json``. (Keeping a serialised copy of every document from stage 1 instead measured
   no cheaper on local shards and more than doubled the work dir, so the input is read twice.)

Documents are numbered globally in input order (shard offsets come from stage 1's markers);
stages 1 and 4 read and name them with :mod:`feedline.dedup.shards`, as the engine's run does.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from feedline.dedup.errors import DedupError
from feedline.io import atomic_write
from feedline.io.atomic import remove_stale_temps

from .buckets import (
    band_partition,
    bucket_groups,
    connected_labels,
    exact_duplicates,
    exact_partition,
    order_by,
)
from .engine import DedupConfig, _bbit_similarity, _jaccard_sorted, _sorted_unique
from .lsh import LSHIndex
from .minhash import MinHasher, mix64
from .shards import DOC_IDS, KINDS, KeptShard, ShardDocuments, doc_id
from .usage import start_usage, task_usage
from .workdir import NpyRows, NpyWriter, WorkDir

_BBIT_MASK = np.uint32(0xFFFF)


# -- the plan every task gets -------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """Everything a task needs; small, so each task gets its own copy."""

    work_root: str
    params: dict[str, Any]
    out_dir: str
    inputs: tuple[tuple[str, str], ...]  # (source path or URL, output name) in input order
    config: DedupConfig
    partitions: int
    text_field: str = "text"
    skip_bad_lines: bool = False

    def work(self) -> WorkDir:
        return WorkDir(self.work_root, self.params)


    def documents(self, shard: int) -> ShardDocuments:
        """Input ``shard``'s documents, read as the one-process run reads them."""
        return ShardDocuments(self.inputs[shard][0], text_field=self.text_field,
                              skip_bad_lines=self.skip_bad_lines)


# -- stage 1 ------------------------------------------------------------------------------------
# Documents per step of stages 1 and 4: their memory is one step, not the shard (512 measured
# ~5 MiB per task here, 1,024 ~9 MiB, at the same CPU within noise).
_SIGNATURE_BATCH = 512
_BAND_RUNS = (("band_key", np.uint64, ()), ("band_band", np.uint16, ()), ("band_doc", np.uint32, ()))
_EXACT_RUNS = (("exact_key", np.uint64, (2,)), ("exact_doc", np.uint32, ()))


class _Stage1Files:
    """Stage 1's outputs written step by step. Per-document arrays are appended in document
    order; band and exact entries go to *run* files, each step's entries ordered by partition,
    and :meth:`finish` merges the runs into the partition-ordered arrays stage 2 reads (the
    same files, byte for byte, as ordering the whole shard at once)."""

    def __init__(self, work: WorkDir, base: str, config: DedupConfig) -> None:
        self.work = work
        self.base = base
        self.exact_verify = config.verify == "exact"
        outputs = [(f"{name}.run", dtype, shape) for name, dtype, shape in (*_BAND_RUNS, *_EXACT_RUNS)]
        outputs += [("ids", np.uint8, ()), ("id_offsets", np.int64, ())]
        if self.exact_verify:
            outputs += [("shingles", np.uint32, ()), ("shingle_offsets", np.int64, ())]
        else:
            outputs += [("bbit", np.uint16, (config.num_perm,))]
        finals = [name for name, _dtype, _shape in (*_BAND_RUNS, *_EXACT_RUNS)]
        for name in [o[0] for o in outputs] + finals + ["band_offsets", "exact_offsets"]:
            remove_stale_temps(work.path(f"{base}/{name}.npy"))
        self.writers: dict[str, NpyWriter] = {}
        try:
            for name, dtype, shape in outputs:
                # runs live until finish() merges them: no fsync for files deleted seconds later
                self.writers[name] = NpyWriter(work.path(f"{base}/{name}.npy"), dtype, shape,
                                               durable=not name.endswith(".run"))
        except BaseException:
            self.abort()
            raise
        self.writers["id_offsets"].append(np.zeros(1, np.int64))
        if self.exact_verify:
            self.writers["shingle_offsets"].append(np.zeros(1, np.int64))
        self.band_bounds: list[np.ndarray] = []  # per step: its runs' partition offsets
        self.exact_bounds: list[np.ndarray] = []
        self.id_bytes = 0
        self.shingle_total = 0

    def add_runs(self, kind: tuple[tuple[str, Any, tuple[int, ...]], ...], arrays: list[np.ndarray],
                 part: np.ndarray, partitions: int, bounds: list[np.ndarray]) -> None:
        order, offsets = order_by(part, partitions)
        for (name, _dtype, _shape), array in zip(kind, arrays, strict=True):
            self.writers[f"{name}.run"].append(array[order])
        bounds.append(offsets)

    def add_ids(self, ids: list[bytes]) -> None:
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        self.writers["ids"].append(np.frombuffer(b"".join(ids), dtype=np.uint8))
        self.writers["id_offsets"].append(self.id_bytes + np.cumsum(lengths))
        self.id_bytes += int(lengths.sum())

    def add_shingles(self, hashes: np.ndarray, counts: np.ndarray) -> None:
        self.writers["shingles"].append(hashes)
        self.writers["shingle_offsets"].append(self.shingle_total + np.cumsum(counts))
        self.shingle_total += len(hashes)

    def finish(self, partitions: int) -> None:
        """Install every array; merge the runs into partition order, one slice at a time."""
        for writer in self.writers.values():
            writer.close()
        for kind, bounds, offsets_name in ((_BAND_RUNS, self.band_bounds, "band_offsets"),
                                           (_EXACT_RUNS, self.exact_bounds, "exact_offsets")):
            starts = np.cumsum([0] + [int(b[-1]) for b in bounds[:-1]]) if bounds else np.zeros(0, np.int64)
            for name, dtype, shape in kind:
                run_path = self.work.path(f"{self.base}/{name}.run.npy")
                rows = NpyRows(run_path)
                out = NpyWriter(self.work.path(f"{self.base}/{name}.npy"), dtype, shape)
                try:
                    for p in range(partitions):
                        for start, b in zip(starts.tolist(), bounds, strict=True):
                            if b[p + 1] > b[p]:
                                out.append(rows.rows(start + int(b[p]), start + int(b[p + 1])))
                    out.close()
                except BaseException:
                    out.abort()
                    raise
                finally:
                    rows.close()
                run_path.unlink()
            total = np.sum(bounds, axis=0) if bounds else np.zeros(partitions + 1, np.int64)
            self.work.save(f"{self.base}/{offsets_name}.npy", np.asarray(total, dtype=np.int64))

    def abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()


def signatures_task(plan: Plan, shard: int) -> dict[str, Any]:
    """Stage 1 for one input shard (see the module docstring), streamed in steps of
    ``_SIGNATURE_BATCH`` documents so that memory does not grow with the shard."""
    started = start_usage()
    work = plan.work()
    config = plan.config
    bands, rows = config.banding()
    hasher = MinHasher(config.num_perm, config.ngram, config.seed)
    lsh = LSHIndex(bands, rows, config.seed)
    base = f"sig/s{shard:05d}"
    files = _Stage1Files(work, base, config)
    count = 0
    indexed = 0

    def flush(ids: list[bytes], texts: list[str]) -> None:
        nonlocal count, indexed
        if not texts:
            return
        batch = hasher.shingle_batch(texts)
        signatures = hasher.signatures_from_shingles(batch)
        counts = batch.counts()
        nonempty = np.flatnonzero(counts > 0)
        keys = lsh.band_keys(signatures[nonempty]).ravel()
        flat_bands = np.tile(np.arange(bands, dtype=np.uint16), len(nonempty))
        flat_docs = np.repeat((nonempty + count).astype(np.uint32), bands)
        files.add_runs(_BAND_RUNS, [keys, flat_bands, flat_docs],
                       band_partition(flat_bands, keys, plan.partitions), plan.partitions, files.band_bounds)
        exact = batch.exact_keys
        files.add_runs(_EXACT_RUNS, [exact, np.arange(count, count + len(texts), dtype=np.uint32)],
                       exact_partition(exact[:, 0], plan.partitions), plan.partitions, files.exact_bounds)
        files.add_ids(ids)
        if files.exact_verify:
            files.add_shingles(batch.hashes, counts)
        else:
            files.writers["bbit"].append((signatures & _BBIT_MASK).astype(np.uint16))
        count += len(texts)
        indexed += len(nonempty)

    name = plan.inputs[shard][1]
    try:
        ids: list[bytes] = []
        texts: list[str] = []
        for line, doc, text in plan.documents(shard):
            ids.append(doc_id(doc, name, line).encode("utf-8"))
            texts.append(text)
            if len(texts) == _SIGNATURE_BATCH:
                flush(ids, texts)
                ids, texts = [], []
        flush(ids, texts)
    except BaseException:
        files.abort()
        raise
    files.finish(plan.partitions)
    info = {"documents": count, "indexed": indexed, "band_entries": indexed * bands, "doc_ids": DOC_IDS}
    return {**work.mark(base, info), **task_usage(started)}


# -- stage 2 ------------------------------------------------------------------------------------
def shard_offsets(counts: list[int]) -> np.ndarray:
    """Global number of each shard's first document (and the total at the end)."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def read_partition(work: WorkDir, p: int, counts: list[int]) -> dict[str, np.ndarray]:
    """Partition ``p``'s band and exact entries from every shard, documents numbered globally."""
    offsets = shard_offsets(counts)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("band", "key", "doc", "exact", "exact_doc")}
    for s in range(len(counts)):
        base = f"sig/s{s:05d}"
        bo = work.load(f"{base}/band_offsets.npy")
        lo, hi = int(bo[p]), int(bo[p + 1])
        parts["band"].append(np.array(work.load(f"{base}/band_band.npy")[lo:hi]))
        parts["key"].append(np.array(work.load(f"{base}/band_key.npy")[lo:hi]))
        parts["doc"].append(work.load(f"{base}/band_doc.npy")[lo:hi].astype(np.uint64) + np.uint64(offsets[s]))
        eo = work.load(f"{base}/exact_offsets.npy")
        lo, hi = int(eo[p]), int(eo[p + 1])
        parts["exact"].append(np.array(work.load(f"{base}/exact_key.npy")[lo:hi]).reshape(-1, 2))
        parts["exact_doc"].append(
            work.load(f"{base}/exact_doc.npy")[lo:hi].astype(np.uint64) + np.uint64(offsets[s])
        )
    empty = {"band": np.uint16, "key": np.uint64, "doc": np.uint64, "exact_doc": np.uint64}
    out = {k: np.concatenate(v) if v else np.empty(0, empty[k]) for k, v in parts.items() if k != "exact"}
    out["exact"] = np.concatenate(parts["exact"]) if parts["exact"] else np.empty((0, 2), np.uint64)
    return out


def buckets_task(plan: Plan, p: int, counts: list[int]) -> dict[str, Any]:
    """Stage 2 for partition ``p``: candidate groups and exact duplicates within it."""
    started = start_usage()
    work = plan.work()
    entries = read_partition(work, p, counts)
    held = sum(a.nbytes for a in entries.values())
    members, offsets = bucket_groups(entries["band"], entries["key"], entries["doc"])
    dup_doc, dup_of = exact_duplicates(entries["exact"], entries["exact_doc"])
    base = f"buckets/p{p:04d}"
    work.save(f"{base}/members.npy", members)
    work.save(f"{base}/group_offsets.npy", offsets)
    work.save(f"{base}/exact_doc.npy", dup_doc)
    work.save(f"{base}/exact_of.npy", dup_of)
    info = {
        "band_entries": len(entries["key"]),
        "groups": len(offsets) - 1,
        "exact_dups": len(dup_doc),
        "index_bytes": held,
    }
    return {**work.mark(base, info), **task_usage(started)}


# -- stage 3 ------------------------------------------------------------------------------------
def _starts(sizes: np.ndarray) -> np.ndarray:
    """Offset of each group's first member, for groups of ``sizes`` laid end to end."""
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def _unique_groups(members: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated groups (a near-duplicate pair shares most of its bands): pairs through numpy,
    the few larger groups through a set."""
    starts = _starts(sizes)
    pair = sizes == 2
    pairs = np.stack([members[starts[pair]], members[starts[pair] + 1]], axis=1)
    pairs = np.unique(pairs, axis=0) if len(pairs) else pairs.reshape(0, 2)
    seen: set[tuple[int, ...]] = set()
    big: list[np.ndarray] = []
    for g in np.flatnonzero(~pair).tolist():
        group = members[starts[g] : starts[g] + sizes[g]]
        key = tuple(group.tolist())
        if key not in seen:
            seen.add(key)
            big.append(group)
    out_members = np.concatenate([pairs.ravel(), *big]) if len(pairs) or big else np.empty(0, np.uint64)
    out_sizes = np.concatenate([np.full(len(pairs), 2, np.int64), np.array([len(g) for g in big], np.int64)])
    return out_members.astype(np.uint64), out_sizes


def cluster_task(plan: Plan) -> dict[str, Any]:
    """Stage 3a: exact duplicates gathered, groups without them, union-find, clusters split
    into ``plan.partitions`` resolve tasks (a cluster never split)."""
    started = start_usage()
    work = plan.work()
    parts = range(plan.partitions)
    exact_doc = np.concatenate([work.load(f"buckets/p{p:04d}/exact_doc.npy", mmap=False) for p in parts])
    exact_of = np.concatenate([work.load(f"buckets/p{p:04d}/exact_of.npy", mmap=False) for p in parts])
    order = np.argsort(exact_doc, kind="stable")
    exact_doc, exact_of = exact_doc[order], exact_of[order]
    members_list, sizes_list = [], []
    for p in parts:
        members_list.append(work.load(f"buckets/p{p:04d}/members.npy", mmap=False))
        sizes_list.append(np.diff(work.load(f"buckets/p{p:04d}/group_offsets.npy", mmap=False)))
    members = np.concatenate(members_list).astype(np.uint64)
    sizes = np.concatenate(sizes_list).astype(np.int64)
    # exact duplicates never enter the engine's index: out of every group
    gid = np.repeat(np.arange(len(sizes)), sizes)
    if len(exact_doc):
        pos = np.minimum(np.searchsorted(exact_doc, members), len(exact_doc) - 1)
        fresh = exact_doc[pos] != members
        members, gid = members[fresh], gid[fresh]
    sizes = np.bincount(gid, minlength=len(sizes)).astype(np.int64)
    multi = sizes >= 2
    members = members[multi[gid]]
    members, sizes = _unique_groups(members, sizes[multi])
    starts = _starts(sizes)
    nodes, index = np.unique(members, return_inverse=True)
    index = index.ravel()
    firsts = np.repeat(index[starts], sizes)
    others = np.ones(len(members), dtype=bool)
    others[starts] = False
    label = connected_labels(firsts[others], index[others], len(nodes))
    group_root = nodes[label[index[starts]]] if len(starts) else np.empty(0, np.uint64)
    task_of = (mix64(group_root.copy()) % np.uint64(plan.partitions)).astype(np.int64)
    element_task = np.repeat(task_of, sizes)
    for k in parts:
        chosen = task_of == k
        offsets = np.zeros(int(chosen.sum()) + 1, dtype=np.int64)
        np.cumsum(sizes[chosen], out=offsets[1:])
        work.save(f"cluster/r{k:04d}_members.npy", members[element_task == k])
        work.save(f"cluster/r{k:04d}_offsets.npy", offsets)
    work.save("cluster/exact_doc.npy", exact_doc)
    work.save("cluster/exact_of.npy", exact_of)
    cluster_sizes = np.bincount(label) if len(label) else np.zeros(1, np.int64)
    info = {
        "exact_dups": len(exact_doc),
        "groups": len(sizes),
        "candidates": len(nodes),
        "clusters": int(np.count_nonzero(cluster_sizes)),
        "largest_cluster": int(cluster_sizes.max()),
        "index_bytes": int(members.nbytes + nodes.nbytes + label.nbytes + exact_doc.nbytes * 2),
    }
    return {**work.mark("cluster/cluster", info), **task_usage(started)}


class _Similarity:
    """The engine's check of one candidate pair, reading stage 1's arrays of any shard.

    Rows are read with ``pread`` at their offset in the ``.npy`` file rather than through a
    memory map, so the task's memory is the rows it checks, not the file pages read ahead."""

    def __init__(self, plan: Plan, counts: list[int]) -> None:
        self.work = plan.work()
        self.exact = plan.config.verify == "exact"
        self.offsets = shard_offsets(counts)
        self._files: dict[int, tuple[int, int, np.ndarray | None, int]] = {}
        self._sets: dict[int, np.ndarray] = {}

    def _shard(self, doc: int) -> tuple[int, int]:
        s = int(np.searchsorted(self.offsets, doc, side="right")) - 1
        return s, doc - int(self.offsets[s])

    def _of(self, s: int) -> tuple[int, int, np.ndarray | None, int]:
        """(fd, data offset in the file, row offsets or None, row width in items) of shard ``s``."""
        if s not in self._files:
            base = f"sig/s{s:05d}"
            name = f"{base}/shingles.npy" if self.exact else f"{base}/bbit.npy"
            mapped = self.work.load(name)
            header = int(mapped.offset) if isinstance(mapped, np.memmap) else 0
            rows = np.array(self.work.load(f"{base}/shingle_offsets.npy")) if self.exact else None
            width = 1 if self.exact else int(mapped.shape[1])
            fd = os.open(self.work.path(name), os.O_RDONLY)
            self._files[s] = (fd, header, rows, width)
        return self._files[s]

    def _value(self, doc: int) -> np.ndarray:
        if doc not in self._sets:
            s, local = self._shard(doc)
            fd, header, rows, width = self._of(s)
            if rows is not None:
                lo, hi = int(rows[local]), int(rows[local + 1])
                raw = np.frombuffer(os.pread(fd, 4 * (hi - lo), header + 4 * lo), dtype=np.uint32).copy()
                self._sets[doc] = _sorted_unique(raw)
            else:
                data = os.pread(fd, 2 * width, header + 2 * width * local)
                self._sets[doc] = np.frombuffer(data, dtype=np.uint16).copy()
        return self._sets[doc]

    def __call__(self, a: int, b: int) -> float:
        if self.exact:
            return _jaccard_sorted(self._value(a), self._value(b))
        return _bbit_similarity(self._value(a), self._value(b))

    def forget(self, doc: int) -> None:
        """Drop a document's set once no later document can be compared with it."""
        self._sets.pop(doc, None)

    def close(self) -> None:
        for fd, *_ in self._files.values():
            os.close(fd)
        self._files.clear()


def resolve_groups(
    members: np.ndarray, offsets: np.ndarray, similarity: Callable[[int, int], float], threshold: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """The engine's rule over whole clusters: ``(near_doc, near_of, pairs checked)``, by doc."""
    groups_of: dict[int, list[int]] = {}
    for g in range(len(offsets) - 1):
        for m in members[offsets[g] : offsets[g + 1]].tolist():
            groups_of.setdefault(m, []).append(g)
    kept_in: list[list[int]] = [[] for _ in range(len(offsets) - 1)]
    near_doc: list[int] = []
    near_of: list[int] = []
    checked = 0
    forget = getattr(similarity, "forget", None)
    for doc in sorted(groups_of):
        candidates: set[int] = set()
        for g in groups_of[doc]:
            candidates.update(kept_in[g])
        for earlier in sorted(candidates):
            checked += 1
            if similarity(doc, earlier) >= threshold:
                near_doc.append(doc)
                near_of.append(earlier)
                if forget is not None:
                    forget(doc)
                break
        else:
            for g in groups_of[doc]:
                kept_in[g].append(doc)
    return np.array(near_doc, dtype=np.uint64), np.array(near_of, dtype=np.uint64), checked


def resolve_task(plan: Plan, k: int, counts: list[int]) -> dict[str, Any]:
    """Stage 3b for cluster partition ``k``: near-duplicate verdicts of its clusters."""
    started = start_usage()
    work = plan.work()
    members = work.load(f"cluster/r{k:04d}_members.npy", mmap=False)
    offsets = work.load(f"cluster/r{k:04d}_offsets.npy", mmap=False)
    similarity = _Similarity(plan, counts)
    try:
        near_doc, near_of, checked = resolve_groups(members, offsets, similarity, plan.config.threshold)
    finally:
        similarity.close()
    base = f"resolve/r{k:04d}"
    work.save(f"{base}_doc.npy", near_doc)
    work.save(f"{base}_of.npy", near_of)
    info = {"near_dups": len(near_doc), "checked_pairs": checked}
    return {**work.mark(base, info), **task_usage(started)}


# -- stage 4 ------------------------------------------------------------------------------------
def _verdict_rows(work: WorkDir, partitions: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Kind (0 kept, 1 exact, 2 near) and target of documents ``lo .. hi - 1``."""
    kind = np.zeros(hi - lo, dtype=np.uint8)
    target = np.zeros(hi - lo, dtype=np.uint64)
    sources = [("cluster/exact_doc.npy", "cluster/exact_of.npy", 1)]
    sources += [(f"resolve/r{k:04d}_doc.npy", f"resolve/r{k:04d}_of.npy", 2) for k in range(partitions)]
    for doc_name, of_name, value in sources:
        docs = work.load(doc_name)
        a, b = np.searchsorted(docs, [lo, hi])
        if b > a:
            rows = np.array(docs[a:b]).astype(np.int64) - lo
            kind[rows] = value
            target[rows] = work.load(of_name)[a:b]
    return kind, target


def _ids_of(work: WorkDir, docs: np.ndarray, counts: list[int]) -> dict[int, str]:
    """Ids of documents (global numbers) of any shard, from stage 1's id arrays."""
    offsets = shard_offsets(counts)
    shards = np.searchsorted(offsets, docs, side="right") - 1
    found: dict[int, str] = {}
    for s in np.unique(shards).tolist():
        id_offsets = work.load(f"sig/s{s:05d}/id_offsets.npy")
        blob = work.load(f"sig/s{s:05d}/ids.npy")
        for doc in docs[shards == s].tolist():
            local = doc - int(offsets[s])
            found[doc] = bytes(blob[int(id_offsets[local]) : int(id_offsets[local + 1])]).decode("utf-8")
    return found


def staged_path(out_dir: str | os.PathLike[str], name: str) -> Path:
    """Where stage 4 leaves kept shard ``name`` until every write task is done:
    ``.<name>.staged`` beside its final name (same folder, so the driver's install is a rename;
    a fixed name, so a resumed run finds what a killed one finished)."""
    final = Path(out_dir) / name
    return final.with_name(f".{final.name}.staged")


def write_task(plan: Plan, shard: int, counts: list[int]) -> dict[str, Any]:
    """Stage 4 for one input shard: its kept documents and verdict lines through the same
    :class:`~feedline.dedup.shards.KeptShard` the one-process run writes with, streamed
    ``_SIGNATURE_BATCH`` documents at a time (so the shard equals the engine's byte for byte).
    The shard goes to its :func:`staged_path`; the driver installs all of them once every write
    task succeeded, so a failed run leaves no kept shard under its final name."""
    started = start_usage()
    work = plan.work()
    source, name = plan.inputs[shard]
    lo = int(shard_offsets(counts)[shard])
    n = counts[shard]
    kind, target = _verdict_rows(work, plan.partitions, lo, lo + n)
    ids = _ids_of(work, np.unique(target[kind > 0]), counts)
    kinds, targets = kind.tolist(), target.tolist()
    out = staged_path(plan.out_dir, name)
    lines_path = work.path(f"write/s{shard:05d}.jsonl")
    remove_stale_temps(out)
    remove_stale_temps(lines_path)
    number = -1
    with (
        atomic_write(lines_path, "wb") as verdict_out,
        KeptShard(out, name, verdict_out.write, batch=_SIGNATURE_BATCH) as kept,
    ):
        for number, (line, doc, _text) in enumerate(plan.documents(shard)):
            if number >= n:
                raise DedupError(f"{source}: changed while deduplicating (more than {n} documents now)")
            k = kinds[number]
            verdict = "kept" if k == 0 else f"{KINDS[k]}_of:{ids[targets[number]]}"
            kept.add(doc_id(doc, name, line), doc, KINDS[k], verdict)
        if number + 1 != n:
            raise DedupError(f"{source}: changed while deduplicating ({number + 1} documents now, {n} before)")
    totals: dict[str, Any] = kept.counts.to_dict()
    del totals["bad_lines"]  # a bad line stops stage 1 unless skipped; the marker never had them
    return {**work.mark(f"write/s{shard:05d}", {**totals, "doc_ids": DOC_IDS}), **task_usage(started)}


def join_verdicts(work: WorkDir, shards: int, target: Path) -> str:
    """Concatenate the shards' verdict lines into ``target`` atomically; returns their sha256."""
    digest = hashlib.sha256()
    with atomic_write(target, "wb") as out:
        for s in range(shards):
            with open(work.path(f"write/s{s:05d}.jsonl"), "rb") as part:
                while chunk := part.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
    return digest.hexdigest()

