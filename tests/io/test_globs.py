"""expand_paths (io.globs): the one glob expander (curate's --documents, dedup's inputs), local and remote; io.paths' URL test."""

from __future__ import annotations

from pathlib import Path

import pytest

from feedline.io import StoreError
from feedline.io.errors import IoError
from feedline.io.globs import expand_paths
from feedline.io.paths import is_url, local_path


class PartError(Exception):
    """Stands for a part's own error class (CurateError, DedupError ...)."""


def touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"{}\n")


def test_is_url_and_local_path() -> None:
    assert is_url("s3://b/k") and is_url("http://h/x") and not is_url("file:///tmp/x")
    assert not is_url("/tmp/x") and not is_url(Path("rel/x"))
    assert local_path("file:///tmp/x") == "/tmp/x" and local_path("rel/x") == "rel/x"


def test_local_globs_in_pattern_order_sorted_within_each_once(tmp_path: Path) -> None:
    touch(tmp_path, "b/2.jsonl", "b/1.jsonl", "a/1.jsonl", "a/deep/x/3.jsonl", "a/.hidden/4.jsonl")
    got = expand_paths([f"{tmp_path}/b/*.jsonl", f"{tmp_path}/a/**/*.jsonl", f"{tmp_path}/b/1.jsonl"])
    assert got == [
        f"{tmp_path}/b/1.jsonl",
        f"{tmp_path}/b/2.jsonl",
        f"{tmp_path}/a/1.jsonl",  # ** spans zero folders too
        f"{tmp_path}/a/deep/x/3.jsonl",
    ]


def test_a_folder_means_its_files_and_file_urls_are_local(tmp_path: Path) -> None:
    touch(tmp_path, "docs/a.jsonl.gz", "docs/sub/b.json", "docs/readme.txt")
    assert expand_paths([str(tmp_path / "docs")], folder_glob="**/*.json*") == [
        str(tmp_path / "docs/a.jsonl.gz"),
        str(tmp_path / "docs/sub/b.json"),
    ]
    assert expand_paths([f"file://{tmp_path}/docs/*.gz"]) == [str(tmp_path / "docs/a.jsonl.gz")]


def test_no_match_and_missing_file_are_one_line_errors_of_the_callers_class(tmp_path: Path) -> None:
    with pytest.raises(PartError, match=r"nothing/\*\.gz: matches no files$"):
        expand_paths([str(tmp_path / "nothing" / "*.gz")], error=PartError)
    with pytest.raises(PartError, match=r"absent\.jsonl: no such file$"):
        expand_paths([str(tmp_path / "absent.jsonl")], error=PartError)
    with pytest.raises(IoError, match="matches no files"):  # the I/O layer's own by default
        expand_paths([str(tmp_path / "*.none")])


def test_s3_listing_matches_like_a_local_glob(s3_server, monkeypatch) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3 = s3_server.client()
    for key in ["p/docs/b.jsonl.gz", "p/docs/a.jsonl.gz", "p/docs/sub/c.jsonl.gz", "p/docs/.feedline/m.done",
                "p/other/d.jsonl.gz"]:
        s3.put_object(Bucket=s3_server.bucket, Key=key, Body=b"{}\n")
    base = f"s3://{s3_server.bucket}/p"
    assert expand_paths([f"{base}/docs/*.jsonl.gz"]) == [f"{base}/docs/a.jsonl.gz", f"{base}/docs/b.jsonl.gz"]
    assert expand_paths([f"{base}/docs/**/*.gz", f"{base}/*/d.jsonl.gz"]) == [
        f"{base}/docs/a.jsonl.gz",
        f"{base}/docs/b.jsonl.gz",
        f"{base}/docs/sub/c.jsonl.gz",
        f"{base}/other/d.jsonl.gz",
    ]
    assert expand_paths([f"{base}/docs/.feedline/*"]) == [f"{base}/docs/.feedline/m.done"]
    assert expand_paths([f"{base}/docs/named.jsonl"]) == [f"{base}/docs/named.jsonl"]  # no glob: as given
    with pytest.raises(PartError, match=r"/p/docs/\*\.zst: matches no files"):
        expand_paths([f"{base}/docs/*.zst"], error=PartError)


def test_http_cannot_be_globbed(nginx_server) -> None:
    with pytest.raises(StoreError, match="cannot list"):
        expand_paths([f"{nginx_server.url}/docs/*.gz"])
