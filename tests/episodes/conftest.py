"""Session-scoped synthetic LeRobot v3 datasets, written once and served locally: by nginx, S3, GCS,
Azure and the Hub (moto, gcp-storage-emulator, Azurite, tests/hubserver.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset

# AV1 (LeRobot's default encoding), two cameras. Sizes are chosen so LeRobot's size rollover gives
# a concatenated (faststart) file holding episodes 0-1 and single-episode files (moov at the end)
# for episodes 2 and 3; data files hold episodes {0,1} and {2,3}; meta/episodes has two files.
AV1_LAYOUT = dict(
    episodes=4,
    frames_per_episode=[12, 20, 40, 10],
    cameras=2,
    fps=10,
    video_files_size_in_mb=0.03,
    data_files_size_in_mb=0.012,
    episodes_per_meta_file=3,
)
# H.264 with two B-frames and GOP 30: real reordering, ctts, an edit list of two frames; episodes
# 0-1 share a concatenated file, episode 2 rolls over into its own file (moov at the end).
H264_LAYOUT = dict(
    episodes=3,
    frames_per_episode=[14, 33, 9],
    cameras=1,
    fps=10,
    vcodec="h264",
    gop=30,
    bframes=2,
    video_files_size_in_mb=0.019,
)


def copy_to_nginx(synth: SyntheticDataset, server, name: str) -> str:
    """Serve a dataset folder through nginx; returns its root URL."""
    target = Path(server.root) / name
    if not target.exists():
        shutil.copytree(synth.root, target)
    return f"{server.url}/{name}"


def upload_to_s3(synth: SyntheticDataset, server, name: str) -> tuple[str, dict]:
    """Upload a dataset folder to the moto bucket with s3fs; returns (root URL, storage options)."""
    import s3fs

    fs = s3fs.S3FileSystem(**server.storage_options)
    for path in sorted(Path(synth.root).rglob("*")):
        if path.is_file():
            rel = path.relative_to(synth.root).as_posix()
            fs.pipe(f"{server.bucket}/{name}/{rel}", path.read_bytes())
    return f"s3://{server.bucket}/{name}", dict(server.storage_options)


def upload_to_fs(synth: SyntheticDataset, fs, bucket: str, name: str) -> None:
    """Copy a dataset folder into a bucket or container with its fsspec filesystem."""
    for path in sorted(Path(synth.root).rglob("*")):
        if path.is_file():
            fs.pipe(f"{bucket}/{name}/{path.relative_to(synth.root).as_posix()}", path.read_bytes())


def upload_to_gcs(synth: SyntheticDataset, server, name: str) -> tuple[str, dict]:
    upload_to_fs(synth, server.filesystem(), server.bucket, name)
    return f"gs://{server.bucket}/{name}", dict(server.storage_options)


def upload_to_azure(synth: SyntheticDataset, server, name: str) -> tuple[str, dict]:
    upload_to_fs(synth, server.filesystem(), server.container, name)
    return f"az://{server.container}/{name}", dict(server.storage_options)


@pytest.fixture(scope="session")
def av1_dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDataset:
    return write_synthetic_dataset(tmp_path_factory.mktemp("episodes") / "av1", **AV1_LAYOUT)


@pytest.fixture(scope="session")
def h264_dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDataset:
    return write_synthetic_dataset(tmp_path_factory.mktemp("episodes") / "h264", **H264_LAYOUT)


@pytest.fixture(scope="session")
def av1_http(av1_dataset: SyntheticDataset, nginx_server) -> str:
    return copy_to_nginx(av1_dataset, nginx_server, "episodes-av1")


@pytest.fixture(scope="session")
def h264_http(h264_dataset: SyntheticDataset, nginx_server) -> str:
    return copy_to_nginx(h264_dataset, nginx_server, "episodes-h264")


@pytest.fixture(scope="session")
def av1_s3(av1_dataset: SyntheticDataset, s3_server) -> tuple[str, dict]:
    return upload_to_s3(av1_dataset, s3_server, "episodes-av1")


@pytest.fixture(scope="session")
def h264_s3(h264_dataset: SyntheticDataset, s3_server) -> tuple[str, dict]:
    return upload_to_s3(h264_dataset, s3_server, "episodes-h264")


@pytest.fixture(scope="session")
def av1_gs(av1_dataset: SyntheticDataset, gcs_server) -> tuple[str, dict]:
    return upload_to_gcs(av1_dataset, gcs_server, "episodes-av1")


@pytest.fixture(scope="session")
def h264_gs(h264_dataset: SyntheticDataset, gcs_server) -> tuple[str, dict]:
    return upload_to_gcs(h264_dataset, gcs_server, "episodes-h264")


@pytest.fixture(scope="session")
def av1_az(av1_dataset: SyntheticDataset, azure_server) -> tuple[str, dict]:
    return upload_to_azure(av1_dataset, azure_server, "episodes-av1")


@pytest.fixture(scope="session")
def h264_az(h264_dataset: SyntheticDataset, azure_server) -> tuple[str, dict]:
    return upload_to_azure(h264_dataset, azure_server, "episodes-h264")


def add_to_hub(synth: SyntheticDataset, server, name: str) -> str:
    """Serve a dataset folder as a Hub dataset repository (one commit on main); its root URL.
    Read with the ``hub`` fixture active, which points HF_ENDPOINT at the server."""
    repo = f"feedline/{name}"
    if repo not in server.repos:
        server.add_dataset(repo, Path(synth.root))
    return f"hf://datasets/{repo}"


@pytest.fixture(scope="session")
def av1_hub_repo(av1_dataset: SyntheticDataset, hub_server) -> str:
    return add_to_hub(av1_dataset, hub_server, "episodes-av1")


@pytest.fixture(scope="session")
def h264_hub_repo(h264_dataset: SyntheticDataset, hub_server) -> str:
    return add_to_hub(h264_dataset, hub_server, "episodes-h264")


@pytest.fixture
def open_root(request: pytest.FixtureRequest) -> Callable[[str, str], tuple[str, dict]]:
    """``open_root(dataset, where)`` -> (root, storage_options) for where in local/http/s3/gs/az/hub."""

    def resolve(dataset: str, where: str) -> tuple[str, dict]:
        if where == "local":
            return str(request.getfixturevalue(f"{dataset}_dataset").root), {}
        if where == "http":
            return request.getfixturevalue(f"{dataset}_http"), {}
        if where in ("s3", "gs", "az"):
            return request.getfixturevalue(f"{dataset}_{where}")
        if where == "hub":
            request.getfixturevalue("hub")  # HF_ENDPOINT at the Hub server, for this test
            return request.getfixturevalue(f"{dataset}_hub_repo"), {}
        raise ValueError(where)

    return resolve
