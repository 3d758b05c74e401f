"""``packing="best_fit"``: rows that each start at a document, every document in one row once per
epoch, padding masked or documents cropped and both counted, on any world size and through the
floor's resume harness (sample-exact and elastic)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.text import TextError, TokenDataset
from feedline.text.packing import merged_ranges, pack_file
from tests.streaming.resume_harness import TrackedRun, check_elastic, check_resume, resume_points

SEQ = 63  # rows of 64 tokens: the corpus's documents run from a few tokens to a few hundred
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _files(root: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.fromfile(p, dtype="<u2"), np.fromfile(str(p) + ".index", dtype="<u8").astype(np.int64))
            for p in sorted(root.glob("*.ds"))]


@pytest.mark.parametrize("remainder", ["pad", "crop"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pack_file_places_every_document_once_and_accounts_for_every_token(remainder, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 150, size=3000)  # empty documents too, and some longer than a row
    ends = np.cumsum(lengths)
    span = 64
    packed = pack_file(ends, span, remainder, buffer=50)
    starts = ends - lengths
    nonempty = starts[lengths > 0]
    placed = packed.piece_start.tolist()
    assert len(placed) == len(set(placed)) and set(placed) <= set(nonempty.tolist())  # each once at most
    left = sorted(set(nonempty.tolist()) - set(placed))  # only crop's dropped last row
    by_start = dict(zip(starts[lengths > 0].tolist(), lengths[lengths > 0].tolist(), strict=True))
    for row in range(packed.rows):
        pieces = slice(int(packed.row_first[row]), int(packed.row_first[row + 1]))
        held = packed.piece_length[pieces]
        assert held.size >= 1
        assert int(held.sum()) + int(packed.row_padded[row]) == span
        whole = np.array([by_start[s] for s in packed.piece_start[pieces].tolist()])
        assert int((whole - held).sum()) == int(packed.row_dropped[row]) and (held <= whole).all()
        assert (whole > held).sum() <= 1  # at most one cropped document a row
        if remainder == "crop":
            assert packed.row_padded[row] == 0
        elif (whole > held).any():
            assert held.size == 1 and held[0] == span  # pad crops only a document longer than a row
    assert sum(by_start[s] for s in left) == packed.dropped_tail < span
    assert remainder == "crop" or not left
    total = int(packed.piece_length.sum()) + int(packed.row_dropped.sum()) + packed.dropped_tail
    assert total == int(lengths.sum())


def _epoch(ds: TokenDataset, batch_size: int = 8, num_workers: int = 0) -> list[dict]:
    return list(ds.track(DataLoader(ds, batch_size=batch_size, num_workers=num_workers)))


@pytest.mark.parametrize("remainder", ["pad", "crop"])
def test_every_row_starts_at_a_document_and_every_document_is_in_one_row(tokens_root, remainder):
    files = _files(tokens_root)
    eos = json.loads((tokens_root / "manifest.json").read_text())["tokenizer"]["eos_id"]
    ds = TokenDataset(tokens_root, SEQ, packing="best_fit", remainder=remainder, return_index=True,
                      return_sequence_id=True, return_loss_mask=True, pad_id=1)
    seen: list[tuple[int, int]] = []  # (file, first token) of every document in a row
    padded = 0
    for item in ds:
        w = int(item["window_index"])
        file = int(np.searchsorted(ds.file_windows[0], w, side="right")) - 1
        tokens, ends = files[file]
        doc_starts = np.concatenate(([0], ends[:-1]))
        ids, sid, mask = item["input_ids"].numpy(), item["sequence_id"].numpy(), item["loss_mask"].numpy()
        pad = ~mask if remainder == "pad" else np.zeros(ids.size, bool)
        assert not pad[0] and (pad == (np.cumsum(pad) > 0)).all()  # padding only at the end
        assert (ids[pad] == 1).all()
        padded += int(pad.sum())
        pack = ds.packs[0][file]
        row = w - int(ds.file_windows[0][file])
        pieces = range(int(pack.row_first[row]), int(pack.row_first[row + 1]))
        segments = np.unique(sid[~pad])
        assert segments.size == len(pieces)
        for segment, p in zip(segments, pieces, strict=True):
            piece = ids[sid == segment]
            start = int(pack.piece_start[p])
            assert start in set(doc_starts.tolist())  # the file's index: a document starts there
            assert np.array_equal(tokens[start : start + piece.size], piece)  # the row holds its head
            end = int(ends[np.searchsorted(doc_starts, start)])
            assert piece.size <= end - start
            if piece.size == end - start:
                assert piece[-1] == eos  # a whole document, with its EOS
            seen.append((file, start))
    every = {(f, int(s)) for f, (_, ends) in enumerate(files) for s in np.concatenate(([0], ends[:-1]))}
    assert len(seen) == len(set(seen))  # no document twice
    stats = ds.packing_stats(0)
    assert set(seen) | _dropped_tail_docs(ds) == every
    assert stats["documents"] == len(seen) and stats["rows"] == ds.windows and stats["padded"] == padded
    assert stats["tokens"] + stats["dropped"] + stats["dropped_tails"] == sum(t.size for t, _ in files)


def _dropped_tail_docs(ds: TokenDataset) -> set[tuple[int, int]]:
    out = set()
    for f, (pack, ends) in enumerate(zip(ds.packs[0], ds.corpora[0].doc_ends, strict=True)):
        placed = set(pack.piece_start.tolist())
        out |= {(f, int(s)) for s in np.concatenate(([0], ends[:-1])) if int(s) not in placed}
    return out


def test_packing_is_exact_over_2_ranks_x_2_workers_and_two_epochs(tokens_root):
    readers = [TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop", rank=r, world_size=2,
                            chunk_windows=8, return_index=True) for r in range(2)]
    n = readers[0].windows
    orders = []
    for _ in range(2):
        repeats = sum(ds.evened_anchors(2)["repeated"] for ds in readers)
        seen = [int(i) for ds in readers for b in _epoch(ds, num_workers=2) for i in b["window_index"]]
        # every row, a few twice to give both ranks the same batches (even_batches="pad")
        assert set(seen) == set(range(n)) and len(seen) == n + repeats
        orders.append(seen)
    assert orders[0] != orders[1]
    cut = TokenDataset(tokens_root, SEQ)
    assert n != cut.windows and cut.sampler_identity != readers[0].sampler_identity


def test_state_counts_the_tokens_padded_and_dropped(tokens_root):
    ds = TokenDataset(tokens_root, SEQ, packing="best_fit", labels=True, ignore_index=-100, return_index=True)
    batches = iter(ds.track(DataLoader(ds, batch_size=8)))
    next(batches)
    state = ds.state_dict()
    assert state["packing"] == ds.packing_stats(0) and state["packing"]["padded"] > 0
    assert set(state["packing"]) == {"rows", "documents", "tokens", "padded", "dropped", "dropped_tails"}
    again = TokenDataset(tokens_root, SEQ, packing="best_fit", labels=True, ignore_index=-100, return_index=True)
    again.load_state_dict(json.loads(json.dumps(state)))  # the record rides along; the floor ignores it
    assert TokenDataset(tokens_root, SEQ).packing_stats() == {}


def test_packing_resumes_at_many_stops_and_elastically(tokens_root):
    def make() -> TrackedRun:
        return TrackedRun(lambda: TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop",
                                               chunk_windows=8, pool_size=6, seed=3, return_index=True),
                          lambda ds: DataLoader(ds, batch_size=16), lambda b: [int(i) for i in b["window_index"]])

    whole = make()
    full = list(whole)
    first = sum(whole.ds.batches_per_rank(16, 0, epoch=0))
    check_resume(make, [k for k in resume_points(len(full), [first], random_count=3) if k], full=full)

    def reader(rank: int, world: int) -> TokenDataset:
        return TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop", rank=rank, world_size=world,
                            chunk_windows=8, return_index=True)

    everything = list(range(reader(0, 1).windows))
    check_elastic(reader, (2, lambda ds: DataLoader(ds, batch_size=4)),
                  (3, lambda ds: DataLoader(ds, batch_size=6)), lambda b: [int(i) for i in b["window_index"]],
                  10, everything)


def test_packing_options_that_cannot_work_are_one_line_errors(tokens_root):
    with pytest.raises(TextError, match="remainder='pad' pads rows: give return_loss_mask=True"):
        TokenDataset(tokens_root, SEQ, packing="best_fit")
    with pytest.raises(TextError, match="boundary='bos' is for packing='cut'"):
        TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop", boundary="bos")
    with pytest.raises(TextError, match="pad_id=70000 does not fit the 16-bit tokens"):
        TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop", pad_id=70000)


def test_packed_rows_over_nginx_equal_the_local_ones(tokens_root, nginx_server):
    import shutil

    base = Path(nginx_server.root) / "tok-packed"
    shutil.copytree(tokens_root, base)
    options = dict(packing="best_fit", remainder="pad", labels=True, ignore_index=-100, return_index=True)
    local = {int(i["window_index"]): i for i in TokenDataset(tokens_root, SEQ, **options)}
    remote = TokenDataset(f"{nginx_server.url}/{base.name}", SEQ, **options)
    got = 0
    for item in remote:
        mine = local[int(item["window_index"])]
        assert item["input_ids"].tolist() == mine["input_ids"].tolist()
        assert item["labels"].tolist() == mine["labels"].tolist()
        got += 1
    assert got == len(local)
    fetched, tokens = remote.metrics()["bytes_fetched"], remote.packing_stats()["tokens"]
    assert 2 * tokens <= fetched <= 2 * int(remote.corpora[0].tokens.sum())  # gaps between pieces read along


def test_merged_ranges_read_small_gaps_along():
    starts, lengths = np.array([50, 0, 10, 200]), np.array([5, 10, 20, 1])
    assert merged_ranges(starts, lengths)[0] == [(0, 30), (50, 55), (200, 201)]
    ranges, offset_of = merged_ranges(starts, lengths, gap=20)
    assert ranges == [(0, 55), (200, 201)] and offset_of.tolist() == [50, 0, 10, 55]
    flat = np.concatenate([np.arange(a, b) for a, b in ranges])
    for s, n, o in zip(starts, lengths, offset_of, strict=True):
        assert flat[o : o + n].tolist() == list(range(s, s + n))


def test_a_mixture_of_packed_sources_has_exact_counts(tokens_root, second_root):
    from collections import Counter

    from feedline.text import TokenSource

    ds = TokenDataset([TokenSource(str(tokens_root), weight=3), TokenSource(str(second_root), weight=1)], SEQ,
                      packing="best_fit", remainder="crop", epoch_size=400, chunk_windows=4, return_index=True)
    for epoch in range(2):
        ds.set_epoch(epoch)
        counts = Counter(int(i["source_index"]) for i in ds)
        assert counts == Counter(dict(enumerate(ds.counts))) and sum(ds.counts) == 400
        assert ds.packing_stats(epoch)["rows"] == 400


def test_every_packed_row_masks_alike_under_the_loss_options(tokens_root):
    """Each row starts at a document: without labels, its first token is dropped by either option
    in every row (the chunk's first row included), and with labels the targets after each piece."""
    ds = TokenDataset(tokens_root, SEQ, packing="best_fit", remainder="crop", chunk_windows=4,
                      return_loss_mask=True, mask_after_eos=True, return_sequence_id=True)
    for item in ds:
        mask, sid = item["loss_mask"].numpy(), item["sequence_id"].numpy()
        starts = np.flatnonzero(np.diff(sid, prepend=-1))
        assert np.flatnonzero(~mask).tolist() == starts.tolist()
