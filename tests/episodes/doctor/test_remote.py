"""``feedline doctor`` on remote roots (nginx, moto S3): the same findings, only indexes read, never payload."""

from __future__ import annotations

from pathlib import Path

import pytest

from feedline.episodes.doctor import run_doctor
from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset
from tests.episodes.conftest import copy_to_nginx
from tests.episodes.doctor import plant


@pytest.fixture(scope="module")
def large_video_dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDataset:
    """Videos of about 1.2 MB per episode (noisy 320x240), so index reads are visibly not payload:
    episodes 0-1 share a concatenated file (moov first), episode 2 has its own (moov last)."""
    return write_synthetic_dataset(
        tmp_path_factory.mktemp("doctor") / "large", episodes=3, frames_per_episode=40, cameras=1,
        width=320, height=240, noise=60, video_files_size_in_mb=3,
    )


def test_over_http_reads_indexes_not_payload(large_video_dataset: SyntheticDataset, nginx_server) -> None:
    url = copy_to_nginx(large_video_dataset, nginx_server, "doctor-large")
    report = run_doctor(url, progress=False)
    assert [f for f in report.findings if f.severity != "info"] == []
    video_bytes = report.dataset["video_bytes"]
    assert video_bytes > 3_000_000
    # two 64 KiB probes per video at most (front block, then the block holding a trailing moov)
    assert report.bytes_read["mp4_index"] <= 2 * 2 * 64 * 1024
    assert report.bytes_read["total"] < 0.15 * (video_bytes + report.dataset["data_bytes"])
    assert report.checked["orphans"].startswith("not checked")
    orphans = [f for f in report.findings if f.check == "orphans"]
    assert [(f.severity, f.file) for f in orphans] == [("info", None)]


def test_over_http_findings_equal_local_ones(av1_dataset: SyntheticDataset, nginx_server, tmp_path: Path) -> None:
    root = plant.copy(av1_dataset, tmp_path)
    plant.reencode(root, plant.video(plant.CAM0, 1), camera=0, episode=2, frames=30)
    plant.swap_timestamps(root, plant.data(0), episode=1, a=4, b=5)
    url = copy_to_nginx(SyntheticDataset(root, 10, [], [], [], ""), nginx_server, "doctor-defects")
    local, remote = run_doctor(str(root), progress=False), run_doctor(url, progress=False)
    key = [(f.severity, f.check, f.file, f.episode) for f in local.findings if f.severity != "info"]
    assert key == [(f.severity, f.check, f.file, f.episode) for f in remote.findings if f.severity != "info"]
    assert {(c, e) for _, c, _, e in key} == {("frames", 2), ("monotonic", 1)}


def test_on_s3_orphan_files_are_checked(av1_s3: tuple[str, dict]) -> None:
    url, options = av1_s3
    report = run_doctor(url, storage_options=options, progress=False)
    assert [f for f in report.findings if f.severity != "info"] == []
    assert report.checked["orphans"] is True


@pytest.mark.server
@pytest.mark.parametrize("where", ["gs", "az"])
def test_on_gcs_and_azure_the_doctor_finds_nothing_wrong(where: str, request) -> None:
    url, options = request.getfixturevalue(f"av1_{where}")
    report = run_doctor(url, storage_options=options, progress=False)
    assert [f for f in report.findings if f.severity != "info"] == []
    assert report.checked["orphans"] is True


def test_doctor_command_on_an_azure_root(av1_az: tuple[str, dict]) -> None:
    from tests.cli import run_feedline

    url, options = av1_az
    option = f"connection_string={options['connection_string']}"
    proc = run_feedline("doctor", url, "--storage-option", option, check=True)
    assert "connection_string" not in proc.stdout and "AccountKey" not in proc.stdout
