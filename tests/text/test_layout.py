"""datatrove's layout: the metadata text, the three files installed together or not at all."""

from __future__ import annotations

import numpy as np
import pytest

from feedline.text.layout import ShardWriter, metadata_text, metric, read_shard, shard_files
from tests.crash import temp_files

# humanize.metric(n, unit="T") as datatrove writes it
HUMANIZED = {0: "0.00 T", 5: "5.00 T", 12: "12.0 T", 999: "999 T", 1000: "1.00 kT", 1234: "1.23 kT",
             15678: "15.7 kT", 123456: "123 kT", 1234567: "1.23 MT", 98765432: "98.8 MT", 999999: "1.00 MT",
             10**10: "10.0 GT"}


@pytest.mark.parametrize(("value", "text"), sorted(HUMANIZED.items()))
def test_metric_prefix_matches_humanize(value, text):
    assert metric(value, "T") == text


def test_metadata_is_datatroves_three_lines():
    assert metadata_text("gpt2", 2, 1234567) == "gpt2|2\n1234567\n1.23 MT"


def test_shard_files_appear_together_with_the_index_of_document_ends(tmp_path):
    writer = ShardWriter(str(tmp_path / "a" / "x.ds"), np.dtype(np.uint16), "tok")
    writer.write(np.array([5, 6, 0, 7, 0], np.uint16), np.array([3, 2]))
    writer.write(np.array([9, 0], np.uint16), np.array([2]))
    assert not any(p.exists() for p in map(__import__("pathlib").Path, shard_files(tmp_path / "a" / "x.ds")))
    writer.commit()
    tokens, ends = read_shard(tmp_path / "a" / "x.ds", np.dtype(np.uint16))
    assert tokens.tolist() == [5, 6, 0, 7, 0, 9, 0] and ends.tolist() == [3, 5, 7]
    assert (tmp_path / "a" / "x.ds").read_bytes() == np.array([5, 6, 0, 7, 0, 9, 0], "<u2").tobytes()
    assert (tmp_path / "a" / "x.ds.metadata").read_text() == "tok|2\n7\n7.00 T"
    assert temp_files(tmp_path) == []


def test_an_aborted_shard_leaves_nothing(tmp_path):
    writer = ShardWriter(str(tmp_path / "x.ds"), np.dtype(np.uint32), "tok")
    writer.write(np.array([1, 2], np.uint32), np.array([2]))
    writer.abort()
    assert list(tmp_path.iterdir()) == []
