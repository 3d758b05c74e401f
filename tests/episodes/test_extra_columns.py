"""Columns feedline does not know (LeRobot's optional language columns, any list or struct) pass
through both readers and batch through a real DataLoader with workers.

A nested or ragged value (a list of structs, a struct, a list whose length varies by frame) has
no tensor form and torch's default collate refuses lists of unequal length, so both readers give
it as its JSON text: a batch holds a list of those strings, one per sample, as it does for
``task``. Numeric lists of one length stay tensors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.episodes import EpisodeDataset
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.episodes.synth.writer import SyntheticDataset

LANG = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
EVENT = pa.struct([("kind", pa.string()), ("at", pa.float64()), ("tags", pa.list_(pa.string()))])


def _persistent(index: int) -> list[dict]:
    return [{"role": "user", "content": f"step {index} part {k}"} for k in range(index % 3)]


def _event(index: int) -> dict:
    return {"kind": "note" if index % 2 else "cut", "at": index / 10, "tags": ["a"] * (index % 4)}


def _add_columns(path: Path) -> None:
    """The same row groups (one per episode), with three more columns."""
    source = pq.ParquetFile(path)
    groups = [source.read_row_group(i) for i in range(source.num_row_groups)]
    out = path.with_suffix(".tmp")
    writer = None
    for table in groups:
        index = table.column("index").to_pylist()
        table = table.append_column(pa.field("language_persistent", LANG),
                                    pa.array([_persistent(i) for i in index], LANG))
        table = table.append_column(pa.field("language_events", EVENT),
                                    pa.array([_event(i) for i in index], EVENT))
        table = table.append_column("ragged_numbers", pa.array([list(range(i % 5)) for i in index],
                                                               pa.list_(pa.int32())))
        writer = writer or pq.ParquetWriter(out, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    out.replace(path)


@pytest.fixture(scope="module")
def language_root(av1_dataset: SyntheticDataset, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("language") / "av1"
    shutil.copytree(av1_dataset.root, root)
    for path in sorted((root / "data").rglob("*.parquet")):
        _add_columns(path)
    return str(root)


def _expected(index: int) -> dict[str, str]:
    return {
        "language_persistent": json.dumps(_persistent(index), separators=(",", ":")),
        "language_events": json.dumps(_event(index), separators=(",", ":")),
        "ragged_numbers": json.dumps(list(range(index % 5)), separators=(",", ":")),
    }


def _check(item: dict) -> None:
    index = int(item["index"])
    for key, text in _expected(index).items():
        assert isinstance(item[key], str) and json.loads(item[key]) == json.loads(text), key


def test_map_style_reader_passes_them_through(language_root: str):
    ds = EpisodeDataset(root=language_root)
    for i in range(len(ds)):
        _check(ds[i])
    assert isinstance(ds[0]["observation.state"], torch.Tensor)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_through_a_dataloader_with_workers(language_root: str, workers: int):
    ref = EpisodeDataset(root=language_root)
    for ds in (ref, StreamingEpisodeDataset(root=language_root, episode_pool_size=2)):
        loader = DataLoader(ds, batch_size=5, num_workers=workers, timeout=120 if workers else 0)
        seen = 0
        for batch in loader:
            n = len(batch["index"])
            assert all(len(batch[key]) == n for key in _expected(0))
            for j in range(n):
                _check({key: batch[key][j] for key in [*_expected(0), "index"]})
            seen += n
        assert seen == len(ref)


def test_streamed_samples_equal_map_style(language_root: str):
    ref = EpisodeDataset(root=language_root)
    by_index = {int(ref[i]["index"]): ref[i] for i in range(len(ref))}
    for item in StreamingEpisodeDataset(root=language_root, episode_pool_size=2):
        expected = by_index[int(item["index"])]
        assert list(item) == list(expected)
        for key in _expected(0):
            assert item[key] == expected[key]
