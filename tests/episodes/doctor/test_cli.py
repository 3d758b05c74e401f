"""``feedline doctor`` as a user runs it: exit code = errors, ``--json``, one-line bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedline.episodes import EpisodeDataset
from feedline.episodes.doctor.cli import SHOWN_PER_CHECK, root_url
from feedline.episodes.doctor.findings import MAX_EXIT_CODE, Finding, Report
from feedline.episodes.errors import EpisodeFormatError
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


def _renumber(root: Path, old: int, new: int) -> None:
    """Give episode ``old`` the index ``new`` in meta/episodes and in its data rows alike."""
    plant.edit_episodes(root, old, "episode_index", lambda _: new)
    for path in sorted((root / "data").rglob("*.parquet")):
        plant.rewrite_data(root, path.relative_to(root).as_posix(), lambda t: t.set_column(
            t.column_names.index("episode_index"), "episode_index",
            pa.array([new if e == old else e for e in t.column("episode_index").to_pylist()],
                     t.schema.field("episode_index").type)))


@pytest.mark.parametrize("index", [-5, 10**12])
def test_a_negative_or_absurd_episode_index_is_an_error(h264_dataset, tmp_path: Path, index: int) -> None:
    root = plant.copy(h264_dataset, tmp_path)
    _renumber(root, 2, index)
    proc = run_feedline("doctor", str(root), "--json")
    assert proc.returncode >= 1, proc.stdout + proc.stderr
    errors = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"]
    assert any(f["episode"] == index and f"episode_index {index} is not in 0.." in f["problem"] for f in errors)
    with pytest.raises(EpisodeFormatError, match=f"episode_index {index} is not in 0"):
        EpisodeDataset(root=root)  # what the doctor says is what the readers do


def test_a_dataset_of_zero_episodes_is_an_error(h264_dataset, tmp_path: Path) -> None:
    root = plant.copy(h264_dataset, tmp_path)
    for path in (root / "meta" / "episodes").rglob("*.parquet"):
        pq.write_table(pq.read_table(path).slice(0, 0), path)
    info = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**info, "total_episodes": 0, "total_frames": 0}))
    proc = run_feedline("doctor", str(root))
    assert proc.returncode >= 1, proc.stdout
    assert "error   [metadata] meta/episodes: meta/episodes holds no episode" in proc.stdout


def test_output_is_capped_per_check_and_control_characters_are_escaped(h264_dataset, tmp_path: Path) -> None:
    root = plant.copy(h264_dataset, tmp_path)
    source = root / plant.data(0)
    for i in range(SHOWN_PER_CHECK + 7):  # files no episode points at: one orphan finding each
        shutil.copy(source, root / "data" / "chunk-000" / f"stray-{i:03d}.parquet")
    shutil.copy(source, root / "data" / "chunk-000" / "evil\x1b[2J\x07.parquet")
    capped = run_feedline("doctor", str(root)).stdout
    orphans = [line for line in capped.splitlines() if line.startswith("warning [orphans]")]
    assert len(orphans) == SHOWN_PER_CHECK, capped
    assert "[orphans] 8 more finding(s) of this check not shown (28 in all); --all prints every one" in capped
    full = run_feedline("doctor", str(root), "--all").stdout
    assert len([line for line in full.splitlines() if line.startswith("warning [orphans]")]) == 28
    assert "\x1b" not in full and "\x07" not in full and "evil\\x1b[2J\\x07.parquet" in full
    assert len(json.loads(run_feedline("doctor", str(root), "--json").stdout)["findings"]) >= 28


def test_a_nan_timestamp_is_quoted_as_a_number(h264_dataset, tmp_path: Path) -> None:
    root = plant.copy(h264_dataset, tmp_path)
    plant.edit_episodes(root, 1, f"videos/{plant.CAM0}/from_timestamp", lambda _: float("nan"))
    proc = run_feedline("doctor", str(root))
    assert proc.returncode >= 1 and "from_timestamp nan / to_timestamp " in proc.stdout, proc.stdout
    assert "np.float64" not in proc.stdout
    with pytest.raises(EpisodeFormatError) as err:  # the readers' own message
        EpisodeDataset(root=root)
    assert "- nan = nan s" in str(err.value) and "np." not in str(err.value), err.value
