"""``feedline doctor`` as a user runs it: exit code = errors, ``--json``, one-line bad input."""

from __future__ import annotations

import json
from pathlib import Path

from feedline.episodes.doctor.cli import root_url
from feedline.episodes.doctor.findings import MAX_EXIT_CODE, Finding, Report
from feedline.episodes.synth.writer import SyntheticDataset
from tests.cli import run_feedline
from tests.episodes.doctor import plant


def _two_errors(synth: SyntheticDataset, tmp_path: Path) -> Path:
    root = plant.copy(synth, tmp_path)
    plant.cut(root, plant.video(plant.CAM1, 2), keep=0)
    plant.cut(root, plant.data(1), drop=100)
    return root


def test_exit_code_is_the_number_of_errors(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = _two_errors(av1_dataset, tmp_path)
    proc = run_feedline("doctor", str(root))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.count("\nerror ") == 2
    assert "zero-byte MP4" in proc.stdout and "fix: " in proc.stdout
    assert "exit code 2" in proc.stdout and "\nread " in proc.stdout
    clean = run_feedline("doctor", str(av1_dataset.root))
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_json_report(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = _two_errors(av1_dataset, tmp_path)
    proc = run_feedline("doctor", str(root), "--json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["format"] == "feedline-doctor" and report["version"] == 1
    assert report["summary"]["errors"] == 2 and report["exit_code"] == 2
    assert set(report["bytes_read"]) == {"metadata", "parquet_footers", "parquet_columns", "mp4_index", "total"}
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert {(f["check"], f["file"], f["episode"]) for f in errors} == {
        ("files", plant.video(plant.CAM1, 2), None), ("files", plant.data(1), None),
    }
    assert all(set(f) == {"severity", "check", "file", "episode", "problem", "fix"} for f in report["findings"])


def test_no_dataset_is_one_line(tmp_path: Path) -> None:
    proc = run_feedline("doctor", str(tmp_path))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedline: error: ") and "meta/info.json" in lines[0]


def test_exit_code_is_capped_for_the_shell() -> None:
    finding = Finding("error", "files", "x", None, "broken", "fix it")
    report = Report("root", [finding] * 300, {"total": 0}, 0, {})
    assert report.exit_code == MAX_EXIT_CODE


def test_repo_ids_become_hub_urls(tmp_path: Path) -> None:
    assert root_url("lerobot/pusht") == "hf://datasets/lerobot/pusht"
    assert root_url("lerobot/pusht", "v3.0") == "hf://datasets/lerobot/pusht@v3.0"
    (tmp_path / "a").mkdir()
    local = str(tmp_path / "a")
    assert root_url(local) == local
    assert root_url("s3://bucket/ds") == "s3://bucket/ds"


def test_full_reads_every_value(av1_dataset: SyntheticDataset) -> None:
    proc = run_feedline("doctor", str(av1_dataset.root), "--full", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["checked"]["data_values"] is True and report["bytes_read"]["parquet_columns"] > 0
