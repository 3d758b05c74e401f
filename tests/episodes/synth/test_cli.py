"""``feedline synth``: a real process writes a bulk dataset both readers open; bad arguments and
an existing root are one line and a non-zero exit, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from tests.cli import run_feedline


def test_synth_writes_a_dataset_the_readers_open(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    root = tmp_path / "ds"
    proc = run_feedline("synth", str(root), "--episodes", "240", "--episodes-per-file", "100",
                        "--cameras", "1", check=True)
    summary = json.loads(proc.stdout)
    assert summary["episodes"] == 240 and summary["cameras"] == ["observation.images.cam_0"]
    assert len(list((root / "data").rglob("*.parquet"))) == 3  # LeRobot's file rollover
    streaming = StreamingEpisodeDataset(root=str(root))
    assert streaming.num_frames == summary["frames"] == len(EpisodeDataset(root=str(root)))


def test_synth_refuses_an_existing_root_and_bad_sizes(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    proc = run_feedline("synth", str(tmp_path / "taken"), "--episodes", "5")
    assert proc.returncode != 0 and "already exists" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list((tmp_path / "taken").iterdir())
    proc = run_feedline("synth", str(tmp_path / "new"), "--episodes", "0")
    assert proc.returncode != 0 and "must be positive" in proc.stderr
    assert not (tmp_path / "new").exists()
