"""The data order saved beside LeRobot's training_state/: atomic, read back, refused when foreign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from feedline.episodes.errors import TrainError
from feedline.episodes.train.order import ORDER_FILE, DataOrder, load_data_order, save_data_order


def test_round_trip_and_rank_choice(tmp_path: Path) -> None:
    ranks = [{"rank": 0, "batches_consumed_on_rank": 7}, {"rank": 1, "batches_consumed_on_rank": 7}]
    path = save_data_order(tmp_path, DataOrder(ranks, {"episode_pool_size": 8}, step=7))
    assert path == tmp_path / ORDER_FILE
    assert [p.name for p in tmp_path.iterdir()] == [ORDER_FILE]  # no temporary file left behind
    order = load_data_order(tmp_path)
    assert order is not None
    assert (order.step, order.world_size, order.settings) == (7, 2, {"episode_pool_size": 8})
    assert order.rank_state(1) == ranks[1]
    assert order.rank_state(3) == ranks[0]  # the reader then refuses the changed world size


def test_a_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    save_data_order(tmp_path, DataOrder([{"rank": 0}], {}, step=1))

    class Unserialisable:
        pass

    with pytest.raises(TypeError):
        save_data_order(tmp_path, DataOrder([{"rank": 0, "bad": Unserialisable()}], {}, step=2))
    order = load_data_order(tmp_path)
    assert order is not None and order.step == 1
    assert [p.name for p in tmp_path.iterdir()] == [ORDER_FILE]


def test_missing_and_foreign_files(tmp_path: Path) -> None:
    assert load_data_order(tmp_path) is None
    (tmp_path / ORDER_FILE).write_text(json.dumps({"format": 99, "ranks": [{}]}))
    with pytest.raises(TrainError, match="not a feedline data order"):
        load_data_order(tmp_path)
    (tmp_path / ORDER_FILE).write_text("{")
    with pytest.raises(TrainError, match="unreadable data order"):
        load_data_order(tmp_path)
