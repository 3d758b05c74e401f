"""hf:// globs (io.globs) without the Hub.

The Hub cannot be reached from CI and no local server speaks its API, so these tests put an
fsspec memory filesystem where ``HfFileSystem`` goes (``feedline.io.globs.hf_filesystem``, the
one seam): the listing still runs through the same fsspec ``glob`` call HfFileSystem inherits,
with the Hub's path layout (``datasets/OWNER/NAME[@REV]/PATH``). What only the real Hub can show
(its revision resolution, pagination) stays untested here; the offline test runs the real
HfFileSystem with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fsspec
import pytest

from feedline.io import globs
from feedline.io.globs import expand_matches, expand_paths
from tests.cli import run_feedline


class PartError(Exception):
    """Stands for a part's own error class (DownloadError ...)."""


@pytest.fixture
def hub(monkeypatch) -> Iterator[tuple[str, object]]:
    """A memory filesystem holding one fake dataset repository; yields (owner, fs)."""
    fs = fsspec.filesystem("memory")
    owner = f"org{uuid.uuid4().hex[:8]}"
    calls: list[str] = []

    class Recording(type(fs)):  # type: ignore[misc]
        def glob(self, path, **kwargs):
            calls.append(path)
            return super().glob(path, **kwargs)

    recording = Recording(skip_instance_cache=True)
    monkeypatch.setattr(globs, "hf_filesystem", lambda **_options: recording)
    try:
        yield owner, calls
    finally:
        if fs.exists(f"/datasets/{owner}"):
            fs.rm(f"/datasets/{owner}", recursive=True)


def put(owner: str, *paths: str, size: int = 3) -> None:
    fs = fsspec.filesystem("memory")
    for path in paths:
        fs.pipe_file(f"/datasets/{owner}/{path}", b"x" * size)


def test_c4_style_glob_lists_one_folder_of_the_repo(hub) -> None:
    owner, calls = hub
    put(owner, *[f"c4/en/c4-train.{i:05d}-of-01024.json.gz" for i in range(12)],
        "c4/en/c4-validation.00000-of-00008.json.gz", "c4/en/.cache/c4-train.00001-of-01024.json.gz",
        "c4/realnewslike/c4-train.00000-of-00512.json.gz")
    pattern = f"hf://datasets/{owner}/c4/en/c4-train.0000*-of-01024.json.gz"
    got = expand_matches([pattern])
    assert [m.path for m in got] == [
        f"hf://datasets/{owner}/c4/en/c4-train.{i:05d}-of-01024.json.gz" for i in range(10)
    ]
    assert {m.size for m in got} == {3}  # sizes come with the listing: no HEAD per shard
    assert calls == [f"datasets/{owner}/c4/en/c4-train.0000*-of-01024.json.gz"]  # one glob, no walk


def test_revision_folder_listing_and_filters(hub) -> None:
    owner, _calls = hub
    put(owner, "ds@v1.0/data/train-0.parquet", "ds@v1.0/data/test-0.parquet", "ds@v1.0/README.md",
        "ds@v1.0/data/sub/train-1.parquet")
    base = f"hf://datasets/{owner}/ds@v1.0/"
    assert expand_paths([base], include=["data/*"], exclude=["*test*"]) == [
        f"{base}data/sub/train-1.parquet", f"{base}data/train-0.parquet",
    ]
    assert expand_paths([f"{base}**/train-*.parquet"]) == [
        f"{base}data/sub/train-1.parquet", f"{base}data/train-0.parquet",
    ]
    with pytest.raises(PartError, match=r"ds@v1\.0/\*\.json: matches no files$"):
        expand_paths([f"{base}*.json"], error=PartError)


def test_a_glob_must_start_below_the_repository(hub) -> None:
    owner, calls = hub
    for pattern in [f"hf://datasets/{owner}/*/en/*.gz", "hf://datasets/*/c4/x.gz", f"hf://{owner}/*"]:
        with pytest.raises(PartError, match="must name the repository"):
            expand_paths([pattern], error=PartError)
    assert calls == []
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"/{owner}/m/w.bin", b"x")  # a model repo's path has no type prefix: OWNER/NAME/PATH
    try:
        assert expand_paths([f"hf://{owner}/m/*.bin"]) == [f"hf://{owner}/m/w.bin"]
    finally:
        fs.rm(f"/{owner}", recursive=True)


def test_offline_hub_is_a_one_line_error_naming_the_pattern(tmp_path) -> None:
    """The real HfFileSystem under HF_HUB_OFFLINE=1 (read at import, hence a fresh process)."""
    pattern = "hf://datasets/allenai/c4/en/c4-train.0000*-of-01024.json.gz"
    proc = run_feedline("download", pattern, "--out", str(tmp_path / "out"), env={"HF_HUB_OFFLINE": "1"}, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"feedline: error: {pattern}: cannot list"), proc.stderr
    assert "HF_HUB_OFFLINE" in lines[0]
    assert not (tmp_path / "out").exists()
