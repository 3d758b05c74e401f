"""``feedline doctor`` on a bulk dataset of thousands of episodes: the default mode reads the
values of a sample per data file and of what the footers' statistics do not clear, so its reads
stay bounded, and on faults the statistics show it finds what ``--full`` finds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from feedline.episodes.doctor import Report, run_doctor
from feedline.episodes.doctor.data import SAMPLE_EPISODES
from feedline.episodes.synth.bulk import write_bulk_dataset
from tests.episodes.doctor import plant

EPISODES, PER_FILE = 3000, 1000


@pytest.fixture(scope="module")
def bulk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("doctor-scale") / "bulk"
    write_bulk_dataset(root, episodes=EPISODES, episodes_per_file=PER_FILE, cameras=1, progress=False)
    return root


def key(report: Report) -> list[tuple[str, str, str | None, int | None]]:
    return [(f.severity, f.check, f.file, f.episode) for f in report.findings if f.severity != "info"]


def test_sampled_reads_are_bounded(bulk: Path) -> None:
    fast = run_doctor(str(bulk), progress=False)
    full = run_doctor(str(bulk), progress=False, full=True)
    assert key(fast) == key(full) == []
    files = fast.dataset["data_files"]
    assert files == EPISODES // PER_FILE
    assert fast.checked["data_values"].startswith(f"sampled: the index and timestamp values of {SAMPLE_EPISODES * files} of {EPISODES}")
    assert full.checked["data_values"] is True
    # a sample of 32 episodes per file: a few requests each, a small share of the full read
    assert fast.bytes_read["parquet_columns"] * 10 < full.bytes_read["parquet_columns"]
    assert fast.requests < full.requests + files * SAMPLE_EPISODES
    assert fast.bytes_read["parquet_footers"] == full.bytes_read["parquet_footers"]


def _drop_rows(root: Path, path: str, episode: int, count: int) -> None:
    def change(table: pa.Table) -> pa.Table:
        episodes = table.column("episode_index").to_numpy()
        rows = np.flatnonzero(episodes == episode)
        keep = np.ones(len(episodes), bool)
        keep[rows[-count:]] = False
        return table.filter(pa.array(keep))

    plant.rewrite_data(root, path, change)


def test_faults_the_statistics_show_are_found_as_with_full(bulk: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(bulk, root)
    _drop_rows(root, plant.data(1), episode=1501, count=2)  # not a sampled episode
    plant.add_orphan_rows(root, plant.data(2), 5)
    fast, full = run_doctor(str(root), progress=False), run_doctor(str(root), progress=False, full=True)
    assert key(fast) == key(full)
    assert {(c, f, e) for _, c, f, e in key(fast)} == {
        ("rows", plant.data(1), 1501), ("orphans", plant.data(2), None),
    }
    problems = {f.check: f.problem for f in fast.findings if f.severity != "info"}
    assert problems == {f.check: f.problem for f in full.findings if f.severity != "info"}


def test_a_swap_the_statistics_cannot_show_needs_full(bulk: Path, tmp_path: Path) -> None:
    """Two swapped timestamps keep every statistic: only the exhaustive read sees them."""
    root = tmp_path / "ds"
    shutil.copytree(bulk, root)
    plant.swap_timestamps(root, plant.data(0), episode=501, a=2, b=3)
    fast, full = run_doctor(str(root), progress=False), run_doctor(str(root), progress=False, full=True)
    assert key(full) == [("error", "monotonic", plant.data(0), 501)]
    assert key(fast) == []
    assert "--full" in fast.checked["data_values"]
