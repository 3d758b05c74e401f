"""``run_doctor`` on real synthetic datasets (PyAV-encoded MP4s, real Parquet), one planted defect
per check: each test asserts the exact finding (severity, check, file, episode).

The AV1 layout (tests/episodes/conftest.py): per camera ``file-000.mp4`` holds episodes 0-1
(concatenated, moov first), ``file-001.mp4`` episode 2 (40 frames) and ``file-002.mp4`` episode 3
(moov last); ``data/.../file-000.parquet`` holds episodes 0-1, ``file-001.parquet`` 2-3.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from feedline.episodes.doctor import Finding, Report, run_doctor
from feedline.episodes.doctor import video as doctor_video
from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset
from tests.episodes.doctor import plant
from tests.episodes.doctor.plant import CAM0, CAM1, data, video


def doctor(root: Path | str, **kwargs) -> Report:
    return run_doctor(str(root), progress=False, **kwargs)


def problems(report: Report, *severities: str) -> list[Finding]:
    wanted = severities or ("error", "warning")
    return [f for f in report.findings if f.severity in wanted]


def only(report: Report, check: str) -> Finding:
    """The one error or warning of the report, which must come from ``check``."""
    found = problems(report)
    assert len(found) == 1, "\n".join(f"{f.severity} {f.check} {f.file} {f.episode}: {f.problem}" for f in found)
    assert found[0].check == check, found[0]
    return found[0]


def test_clean_datasets_have_no_problem(av1_dataset: SyntheticDataset, h264_dataset: SyntheticDataset) -> None:
    for synth in (av1_dataset, h264_dataset):
        report = doctor(synth.root)
        assert problems(report) == [], problems(report)
        assert report.exit_code == 0
        assert report.dataset["episodes"] == len(synth.episode_lengths)
        assert report.dataset["frames"] == synth.total_frames
        tolerance = [f for f in report.findings if f.check == "tolerance"]
        assert len(tolerance) == 1 and "(the default)" in tolerance[0].problem
        assert report.bytes_read["parquet_columns"] > 0 and report.bytes_read["mp4_index"] > 0


def test_frames_missing_from_a_container(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.reencode(root, video(CAM0, 1), camera=0, episode=2, frames=30)
    found = only(doctor(root), "frames")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM0, 1), 2)
    assert "holds 30 frames" in found.problem and "10 fewer" in found.problem


def test_a_to_timestamp_the_readers_refuse(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.edit_episodes(root, 0, f"videos/{CAM0}/to_timestamp", lambda t: t + 0.3)
    with pytest.raises(EpisodeFormatError, match="episode 0"):  # the reader's own verdict
        from feedline.episodes.format import load_meta
        from feedline.io import open_store

        load_meta(open_store(str(root)))
    found = only(doctor(root), "timestamps")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM0, 0), 0)
    assert "+3.00 frames" in found.problem


def test_a_to_timestamp_off_the_encoded_end(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.edit_episodes(root, 3, f"videos/{CAM1}/to_timestamp", lambda t: t + 0.04)
    found = only(doctor(root), "timestamps")
    assert (found.severity, found.file, found.episode) == ("warning", video(CAM1, 2), 3)
    assert "0.40 frames off" in found.problem


def test_frames_off_their_times_need_a_larger_tolerance(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    # both ends move by 2 ms: the same frames, each 2 ms from the time the reader asks for
    for column in ("from_timestamp", "to_timestamp"):
        plant.edit_episodes(root, 1, f"videos/{CAM0}/{column}", lambda t: t + 0.002)
    report = doctor(root)
    found = only(report, "tolerance")
    assert (found.severity, found.file, found.episode) == ("warning", video(CAM0, 0), 1)
    assert "tolerance_s=0.005" in found.fix
    summary = [f for f in report.findings if f.check == "tolerance" and f.severity == "info"]
    assert "0.002 s" in summary[0].problem and "tolerance_s=0.005 is enough" in summary[0].problem


def test_orphan_rows_and_orphan_videos(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.add_orphan_rows(root, data(0), 5)
    found = only(doctor(root), "orphans")
    assert (found.severity, found.file, found.episode) == ("warning", data(0), None)
    assert "5 of 37 rows" in found.problem

    root = plant.copy(av1_dataset, tmp_path, "videos")
    stray = video(CAM1, 7)
    (root / stray).write_bytes((root / video(CAM1, 2)).read_bytes())
    found = only(doctor(root), "orphans")
    assert (found.severity, found.file, found.episode) == ("warning", stray, None)
    assert "no episode points at this video" in found.problem
    # with a subset of episodes the orphan checks do not run, and say so
    report = doctor(root, episodes=[0, 1])
    assert problems(report) == []
    assert report.checked["orphans"].startswith("not checked")


def test_zero_byte_video(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.cut(root, video(CAM1, 2), keep=0)
    found = only(doctor(root), "files")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM1, 2), None)
    assert "zero-byte MP4" in found.problem


@pytest.mark.parametrize(
    ("file", "words"),
    [(1, "no moov box"), (0, "past the end of the file")],
    ids=["moov-last-lost", "samples-past-the-end"],
)
def test_truncated_video(av1_dataset: SyntheticDataset, tmp_path: Path, file: int, words: str) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.cut(root, video(CAM0, file), drop=1000 if file == 1 else 200)
    found = only(doctor(root), "files")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM0, file), None)
    assert words in found.problem


def test_truncated_parquet_footer(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.cut(root, data(1), drop=100)
    found = only(doctor(root), "files")
    assert (found.severity, found.file, found.episode) == ("error", data(1), None)
    assert "cannot open it" in found.problem


def test_non_monotonic_timestamps(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.swap_timestamps(root, data(0), episode=1, a=4, b=5)
    found = only(doctor(root), "monotonic")
    assert (found.severity, found.file, found.episode) == ("error", data(0), 1)
    assert "frame 5 is at 0.4 s, frame 4 at 0.5 s" in found.problem


def test_an_edit_list_the_reader_rejects(h264_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(h264_dataset, tmp_path)
    path = video("observation.images.cam_0", 1)
    plant.set_elst_rate(root, path, 2)
    found = only(doctor(root), "edit_list")
    assert (found.severity, found.file, found.episode) == ("error", path, None)
    assert "edit list with media rate 2" in found.problem  # the index builder's own message


@pytest.mark.parametrize("fault", ["absent", "feature-missing", "nan", "inf"])
def test_stats(av1_dataset: SyntheticDataset, tmp_path: Path, fault: str) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    if fault == "absent":
        (root / "meta" / "stats.json").unlink()
    elif fault == "feature-missing":
        plant.edit_stats(root, lambda stats: stats.pop("action"))
    else:
        value = math.nan if fault == "nan" else math.inf
        plant.edit_stats(root, lambda stats: stats["observation.state"]["mean"].__setitem__(2, value))
    found = only(doctor(root), "stats")
    severity = "warning" if fault in ("absent", "feature-missing") else "error"
    assert (found.severity, found.file, found.episode) == (severity, "meta/stats.json", None)
    if fault == "feature-missing":
        assert "'action' has no stats" in found.problem
    if fault in ("nan", "inf"):
        assert "'observation.state'" in found.problem and "['mean']" in found.problem


def test_a_codec_no_local_decoder_has(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    """A real file whose sample entry names a codec FFmpeg does not know."""
    root = plant.copy(av1_dataset, tmp_path)
    plant.patch_moov(root, video(CAM0, 2), b"av01", b"zzzz")
    plant.patch_moov(root, video(CAM0, 2), b"av1C", b"zzzC")
    found = only(doctor(root), "codec")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM0, 2), None)
    assert "'zzzz'" in found.problem


def test_a_decoder_this_machine_lacks(av1_dataset: SyntheticDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mock, for the one fault no file can cause: this PyAV has libdav1d, so pretend it has no AV1
    decoder at all."""
    monkeypatch.setattr(doctor_video, "decoder_available", lambda name: name not in ("libdav1d", "libaom-av1"))
    report = doctor(av1_dataset.root)
    codec = problems(report)
    assert {f.check for f in codec} == {"codec"} and len(codec) == 6  # every video, one each
    assert all(f.severity == "error" and "libdav1d" in f.problem for f in codec)
    assert report.exit_code == 6


def test_long_gop_random_access_cost(tmp_path: Path) -> None:
    synth = write_synthetic_dataset(
        tmp_path / "gop", episodes=1, frames_per_episode=60, cameras=1, gop=60
    )
    report = doctor(synth.root)
    found = only(report, "keyframes")
    assert (found.severity, found.file, found.episode) == ("warning", video(CAM0, 0), None)
    assert "a keyframe every 60.0 frames" in found.problem and "30.5 frames on average" in found.problem
    info = [f for f in report.findings if f.check == "keyframes" and f.severity == "info"]
    assert "costs 30.5 decoded frames (60.0 with span_mode='gop')" in info[0].problem


def test_no_dataset_at_the_root_raises(tmp_path: Path) -> None:
    with pytest.raises(EpisodeFormatError, match="meta/info.json: not found"):
        doctor(tmp_path)


def test_a_missing_video(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    (root / video(CAM1, 1)).unlink()
    found = only(doctor(root), "files")
    assert (found.severity, found.file, found.episode) == ("error", video(CAM1, 1), 2)
    assert "not found" in found.problem


def test_rows_missing_from_a_data_file(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.rewrite_data(root, data(1), lambda table: table.slice(0, table.num_rows - 3))  # episode 3's last rows
    found = only(doctor(root), "rows")
    assert (found.severity, found.file, found.episode) == ("error", data(1), 3)
    assert "holds 7 of its 10 rows" in found.problem


def test_totals_the_readers_refuse(av1_dataset: SyntheticDataset, tmp_path: Path) -> None:
    import json

    root = plant.copy(av1_dataset, tmp_path)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["total_frames"] += 5
    (root / "meta" / "info.json").write_text(json.dumps(info))
    found = only(doctor(root), "metadata")
    assert (found.severity, found.file, found.episode) == ("error", "meta/info.json", None)
    assert "total_frames=87 but the episodes hold 82 frames" in found.problem
