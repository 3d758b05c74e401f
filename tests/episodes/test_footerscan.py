"""Row-group pruning arrays read from footer bytes at once: equal to pyarrow's group-by-group
answer wherever the scan answers, and no answer (the per-group path) where a check fails."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes import footer as footer_module
from feedline.episodes.footer import DataFooter, _locate, _parse_thrift
from feedline.episodes.footerscan import scan_index
from feedline.episodes.parquet import RowGroupIndex

FIELDS = ("num_rows", "nbytes", "index_min", "index_max", "has_index", "episode_min",
          "episode_max", "has_episode")


def _footer(table: pa.Table, row_group_size: int, **options) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size, **options)
    data = out.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


def _lerobot_like(sizes: list[int], offset: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    return pa.table({
        "observation.state": pa.array(list(rng.random((n, 6), np.float32)), pa.list_(pa.float32())),
        "timestamp": np.concatenate([np.arange(k) / 10 for k in sizes]).astype(np.float32),
        "frame_index": np.concatenate([np.arange(k) for k in sizes]).astype(np.int64),
        "episode_index": np.repeat(np.arange(len(sizes), dtype=np.int64) + offset, sizes),
        "index": np.arange(n, dtype=np.int64) + 1000 * offset,
        "task_index": np.zeros(n, np.int64),
    })


def _scan(raw: bytes) -> tuple[RowGroupIndex | None, RowGroupIndex]:
    metadata = _parse_thrift(raw)
    layout = _locate(raw, metadata)
    return (
        scan_index(raw, metadata, layout.group_start, layout.group_end, layout.num_rows),
        RowGroupIndex.from_footer(metadata),
    )


def _same(a: RowGroupIndex, b: RowGroupIndex) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=2, max_size=60),
    offset=st.integers(0, 2**40),
)
def test_the_scan_equals_pyarrow_on_lerobot_shaped_files(sizes: list[int], offset: int) -> None:
    # One group per episode, as LeRobot writes: large offsets make every varint longer.
    table = _lerobot_like(sizes, offset)
    bounds = np.cumsum([0, *sizes])
    parts = [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    out = io.BytesIO()
    with pq.ParquetWriter(out, table.schema) as writer:
        for part in parts:
            writer.write_table(part)
    data = out.getvalue()
    raw = data[-8 - int.from_bytes(data[-8:-4], "little") : -8]
    scanned, asked = _scan(raw)
    assert scanned is not None and _same(scanned, asked)


def test_the_bulk_writers_files_are_scanned(tmp_path: Path) -> None:
    from feedline.episodes.synth.bulk import write_bulk_dataset

    write_bulk_dataset(tmp_path / "ds", episodes=300, episodes_per_file=120, cameras=1)
    files = sorted((tmp_path / "ds/data").rglob("*.parquet"))
    assert len(files) == 3
    for path in files:
        data = path.read_bytes()
        scanned, asked = _scan(data[-8 - int.from_bytes(data[-8:-4], "little") : -8])
        assert scanned is not None and _same(scanned, asked)


@pytest.mark.parametrize("case", ["no statistics", "float index", "nulls", "nested int64 first"])
def test_layouts_the_scan_does_not_know_get_no_answer(case: str) -> None:
    table = _lerobot_like([5] * 12)
    options = {}
    if case == "no statistics":
        options["write_statistics"] = False
    elif case == "float index":
        table = table.set_column(table.schema.get_field_index("index"), "index",
                                 pa.array(np.arange(60, dtype=np.float64)))
    elif case == "nulls":
        values = pa.array([None if i % 7 == 0 else i for i in range(60)], pa.int64())
        table = table.set_column(table.schema.get_field_index("index"), "index", values)
    else:
        ids = pa.array([[i, i + 1] for i in range(60)], pa.list_(pa.int64()))
        table = pa.table({"index": table.column("index"), "ids": ids,
                          "episode_index": table.column("episode_index")})
    raw = _footer(table, 5, **options)
    scanned, asked = _scan(raw)
    if scanned is not None:  # an answer is only ever the right one
        assert _same(scanned, asked)
    if case != "nested int64 first":
        assert scanned is None
    parsed = DataFooter.parse(raw, "file.parquet")
    assert _same(parsed.index, asked)


def test_the_footer_reads_the_same_with_or_without_the_scan(monkeypatch) -> None:
    raw = _footer(_lerobot_like([3, 9, 4, 12, 1, 7]), 1000)  # one group holding all: n < 2
    with_scan = DataFooter.parse(raw, "a.parquet")
    parts = _lerobot_like(list(range(1, 30)))
    raw = _footer(parts, 17)
    scanned = DataFooter.parse(raw, "b.parquet")
    monkeypatch.setattr(footer_module, "scan_index", lambda *args: None)
    walked = DataFooter.parse(raw, "b.parquet")
    assert _same(scanned.index, walked.index)
    assert with_scan.num_row_groups == 1
