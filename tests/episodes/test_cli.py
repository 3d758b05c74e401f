"""``feedline build-sidecar``: full-dataset builds, publishing to a bucket, refusals, Hub errors."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes.cli import register
from feedline.episodes.errors import SidecarError
from feedline.episodes.video.sidecar import PUBLISHED_PATH, Sidecar, ensure_sidecar, parse_video
from feedline.errors import FeedlineError
from feedline.io import open_store


def run(argv: list[str]) -> int:
    """Parse and run like ``feedline`` does (one-line error, exit 1) without the full CLI."""
    parser = argparse.ArgumentParser(prog="feedline")
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except FeedlineError as exc:
        print(f"feedline: error: {exc}")
        return exc.exit_code


def all_videos(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.mp4"))


def test_builds_the_full_dataset(av1_dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sidecar.npz"
    code = run(["build-sidecar", "--data-root", str(av1_dataset.root), "--revision", "v3.0",
                "--output", str(out), "--workers", "2"])
    assert code == 0
    assert "videos" in capsys.readouterr().out
    sidecar = Sidecar(out)
    assert sidecar.complete and sidecar.revision == "v3.0"
    assert sorted(sidecar.entries) == all_videos(av1_dataset.root)
    store = open_store(str(av1_dataset.root))
    for path, entry in sidecar.entries.items():
        direct = parse_video(store, path, store.stat(path))
        assert np.array_equal(sidecar.table(path).pts, direct.pts) and entry.samples == len(direct)


def test_push_to_s3_and_readers_use_it(av1_dataset, s3_server, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    prefix = f"{s3_server.bucket}/cli-push"
    for path in sorted(av1_dataset.root.rglob("*")):
        if path.is_file():
            fs.pipe(f"{prefix}/{path.relative_to(av1_dataset.root).as_posix()}", path.read_bytes())
    opts = [f"--storage-option={k}={v}" for k, v in s3_server.storage_options.items()]
    out = tmp_path / "sidecar.npz"
    assert run(["build-sidecar", "--data-root", f"s3://{prefix}", "--output", str(out), "--push", *opts]) == 0
    assert fs.cat(f"{prefix}/{PUBLISHED_PATH}") == out.read_bytes()
    # a fresh machine (empty cache) reads the published archive instead of parsing
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "fresh-home"))
    parsed: list[str] = []

    def parse(store, path, info):  # type: ignore[no-untyped-def]
        parsed.append(path)
        return parse_video(store, path, info)

    store = open_store(f"s3://{prefix}", **s3_server.storage_options)
    videos = all_videos(av1_dataset.root)
    sidecar, _ = ensure_sidecar(store, videos, revision="main", parse=parse)
    assert parsed == [] and sidecar.complete


def test_push_refuses_a_subset(av1_dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "ds"
    shutil.copytree(av1_dataset.root, root)
    video = all_videos(root)[0]
    code = run(["build-sidecar", "--data-root", str(root), "--output", str(tmp_path / "s.npz"),
                "--video", video, "--push"])
    assert code == 1
    assert "refuses a sidecar built for a subset" in capsys.readouterr().out
    assert not (root / PUBLISHED_PATH).exists()
    # without --push a subset is fine, and it is marked incomplete
    assert run(["build-sidecar", "--data-root", str(root), "--output", str(tmp_path / "s.npz"),
                "--video", video]) == 0
    assert not Sidecar(tmp_path / "s.npz").complete


def test_push_to_a_local_root_and_http_is_read_only(av1_dataset, nginx_server, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "ds"
    shutil.copytree(av1_dataset.root, root)
    assert run(["build-sidecar", "--data-root", str(root), "--output", str(tmp_path / "s.npz"), "--push"]) == 0
    assert Sidecar(root / PUBLISHED_PATH).complete
    served = Path(nginx_server.root) / "cli-readonly"
    if not served.exists():
        shutil.copytree(av1_dataset.root, served)
    code = run(["build-sidecar", "--data-root", f"{nginx_server.url}/cli-readonly",
                "--output", str(tmp_path / "h.npz"), "--push"])
    out = capsys.readouterr().out
    assert code == 1 and "cannot publish the sidecar" in out and "read-only" in out
    assert Sidecar(tmp_path / "h.npz").complete  # the build itself worked over HTTP


@pytest.mark.parametrize("offline", [True, False])
def test_hub_unreachable_is_a_clear_error(offline: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Offline mode, or no route to the Hub (or, with a network, a repo that does not exist)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    code = run(["build-sidecar", "--repo-id", "someone/some-dataset", "--output", str(tmp_path / "s.npz"),
                "--push"])
    out = capsys.readouterr().out.strip()
    assert code == 1 and out.startswith("feedline: error: ") and "\n" not in out
    assert "someone/some-dataset" in out
    assert not (tmp_path / "s.npz").exists()
    with pytest.raises(SystemExit):
        run(["build-sidecar", "--output", "x.npz"])  # a source is required


def test_bad_storage_option(tmp_path: Path) -> None:
    with pytest.raises(SidecarError, match="KEY=VALUE"):
        from feedline.episodes.cli import _storage_options

        _storage_options(["nonsense"])
