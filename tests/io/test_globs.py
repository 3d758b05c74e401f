"""expand_paths (io.globs): the one glob expander (download's URLs, curate's --documents, dedup's
inputs), local and remote, with include/exclude filters; io.paths' URL test. The hf:// listing is
tested in test_globs_hf.py."""

from __future__ import annotations

import fnmatch
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.io.errors import IoError
from feedline.io.globs import expand_matches, expand_paths
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


def test_s3_include_exclude_folders_and_listed_sizes(s3_server, monkeypatch) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3 = s3_server.client()
    bodies = {"f/a.zst": b"1", "f/b.zst": b"22", "f/b.txt": b"333", "f/deep/c.zst": b"4444", "f/deep/skip.zst": b"5"}
    for key, body in bodies.items():
        s3.put_object(Bucket=s3_server.bucket, Key=key, Body=body)
    base = f"s3://{s3_server.bucket}/f"
    # A URL ending in / lists everything below it; filters see paths relative to it.
    got = expand_matches([f"{base}/"], include=["*.zst"], exclude=["*/skip*"])
    assert [(m.path, m.size) for m in got] == [
        (f"{base}/{k}", len(bodies[f"f/{k}"])) for k in ("a.zst", "b.zst", "deep/c.zst")
    ]
    with pytest.raises(PartError, match=r"/f/\*: matches no files \(3 listed, all left out by the include/exclude"):
        expand_paths([f"{base}/*"], include=["deep/"], error=PartError)  # * stays in f/; deep/ is below
    assert expand_paths([f"{base}/"], include=["deep/"]) == [f"{base}/deep/c.zst", f"{base}/deep/skip.zst"]


def test_http_has_no_listing_so_globs_are_errors_and_urls_pass_through() -> None:
    signed = "http://127.0.0.1:9/docs/a.jsonl.gz?X-Amz-Signature=ab*c&x=[1]"  # glob chars in the query only
    assert expand_paths([signed, "https://h/b.bin"], include=["nothing"]) == [signed, "https://h/b.bin"]
    for pattern in ["http://127.0.0.1:9/docs/*.gz", "https://h/docs/", "https://u:pw@h/d/?.gz?token=T"]:
        with pytest.raises(PartError, match="HTTP has no listing") as info:
            expand_paths([pattern], error=PartError)
        message = str(info.value)
        assert "\n" not in message and "pw" not in message and "token=T" not in message
        assert message.startswith(pattern.split("?")[0].replace("u:pw", "***")[:10])


def test_include_exclude_on_local_globs(tmp_path: Path) -> None:
    touch(tmp_path, "d/en/a.json.gz", "d/en/b.json.gz", "d/en/x/c.json.gz", "d/fr/a.json.gz", "d/en/a.txt")
    root = tmp_path / "d"
    # * spans / in filters (huggingface_hub's allow_patterns habit); exclude wins over include.
    assert expand_paths([str(root)], include=["*.json.gz"], exclude=["fr/*", "*/x/*"]) == [
        str(root / "en/a.json.gz"), str(root / "en/b.json.gz"),
    ]
    assert expand_paths([f"{root}/en/**/*"], include=["x/"]) == [str(root / "en/x/c.json.gz")]
    # A file named without a glob was asked for: filters do not drop it.
    assert expand_paths([str(root / "en/a.txt")], include=["*.gz"]) == [str(root / "en/a.txt")]
    with pytest.raises(PartError, match=r"d/en/\*: matches no files \(3 listed, all left out"):
        expand_paths([f"{root}/en/*"], exclude=["*"], error=PartError)


NAMES = st.lists(
    st.lists(st.sampled_from(["a", "b", "ab", ".h", "c.gz", "a.zst", "b.zst"]), min_size=1, max_size=3),
    min_size=1, max_size=12,
)
FILTERS = st.lists(st.sampled_from(["*.zst", "a*", "*/b*", "a/", "?", "*", "[ab]*", "ab/*.gz", "nope"]), max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=NAMES, include=FILTERS, exclude=FILTERS)
def test_filtered_listing_is_the_sorted_set_of_listed_paths_that_pass(names, include, exclude) -> None:
    """Oracle: os.walk's files (hidden names skipped, as ``**/*`` does), filtered by plain fnmatch."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for parts in names:
            path = root.joinpath(*parts)
            if any(p.exists() and p.is_file() for p in [*path.parents][: len(parts) - 1]) or path.is_dir():
                continue  # a name already used as a file (or folder) cannot be the other too
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
        listed = []
        for folder, _dirs, files in os.walk(root):
            rel_folder = Path(folder).relative_to(root)
            if any(part.startswith(".") for part in rel_folder.parts):
                continue
            listed += [(rel_folder / f).as_posix() for f in files if not f.startswith(".")]

        def passes(rel: str) -> bool:
            def hit(p: str) -> bool:
                return fnmatch.fnmatchcase(rel, p + "*" if p.endswith("/") else p)
            return (not include or any(map(hit, include))) and not any(map(hit, exclude))

        expected = sorted(str(root / rel) for rel in set(listed) if passes(rel))
        try:
            got = expand_paths([f"{root}/**/*"], include=include, exclude=exclude)
        except IoError as exc:
            assert not expected and "matches no files" in str(exc)
            return
        assert got == expected
        assert expand_paths([f"{root}/**/*", str(root)], include=include, exclude=exclude) == got  # each once
