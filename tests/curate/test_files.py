"""curate.files: reading document/attribute lines and writing outputs, local, HTTP and S3."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from feedline.curate import files
from feedline.curate.errors import CurateError, RetryableFailure
from feedline.io.small import read_small

from .helpers import cut, read_jsonl, write_multiframe_zst

ROWS = [{"id": str(i), "text": f"row {i} " * 30} for i in range(300)]
RAW = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS)


def lines_of(path: str) -> list[dict]:
    with files.open_lines(path) as lines:
        return [json.loads(line) for line in lines]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst", "misnamed.jsonl"])
def test_every_format_reads_whole_and_blank_lines_are_skipped(tmp_path, name) -> None:
    data = RAW.replace(b"\n", b"\n\n   \n", 3)
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".zst") or name.startswith("misnamed"):  # sniffed, not taken from the name
        data = zstandard.ZstdCompressor().compress(data)
    (tmp_path / name).write_bytes(data)
    assert lines_of(str(tmp_path / name)) == ROWS
    assert lines_of(f"file://{tmp_path / name}") == ROWS


def test_truncated_and_missing_files_are_curate_errors(tmp_path) -> None:
    path = write_multiframe_zst(tmp_path / "t.jsonl.zst", ROWS, frames=4)
    cut(path, 0.6)
    with pytest.raises(CurateError, match=r"t\.jsonl\.zst: truncated zstd stream"):
        lines_of(str(path))
    with pytest.raises(CurateError, match=r"absent\.jsonl: no such file"):
        lines_of(str(tmp_path / "absent.jsonl"))


def test_remote_reads_over_http_and_s3(nginx_server, s3_server, monkeypatch) -> None:
    (nginx_server.root / "files-test.jsonl.gz").write_bytes(gzip.compress(RAW))
    assert lines_of(f"{nginx_server.url}/files-test.jsonl.gz") == ROWS
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="files/a.jsonl.zst",
                                  Body=zstandard.ZstdCompressor().compress(RAW))
    url = f"s3://{s3_server.bucket}/files/a.jsonl.zst"
    assert lines_of(url) == ROWS
    assert files.exists(url) and not files.exists(url + ".nope")
    assert files.size_of(url) == len(zstandard.ZstdCompressor().compress(RAW))
    with pytest.raises(CurateError, match="no such file"):
        lines_of(url + ".nope")


def test_a_server_that_keeps_failing_is_retryable(fault_proxy, nginx_server, monkeypatch) -> None:
    (nginx_server.root / "flaky.jsonl").write_bytes(RAW)
    monkeypatch.setenv("FEEDLINE_OUTAGE_S", "1.5")  # the client rides out 60 s by default
    fault_proxy.add_fault("status", code=503, count=10_000)
    with pytest.raises(RetryableFailure, match="503"):
        lines_of(f"{fault_proxy.url}/flaky.jsonl")
    fault_proxy.clear()
    assert lines_of(f"{fault_proxy.url}/flaky.jsonl") == ROWS


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_atomic_output_appears_only_on_commit(tmp_path, suffix) -> None:
    path = tmp_path / "out" / f"o{suffix}"
    output = files.AtomicOutput(str(path))
    for row in ROWS:
        output.write(json.dumps(row).encode() + b"\n")
    size = output.compressed_size()
    assert size > 0 and not path.exists()
    output.commit()
    assert read_jsonl(path) == ROWS and path.stat().st_size >= size
    replaced = files.AtomicOutput(str(path))
    replaced.write(b'{"id": "other"}\n')
    replaced.abort()
    assert read_jsonl(path) == ROWS
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "no temp file left"


def test_gzip_output_is_byte_identical_across_runs(tmp_path) -> None:
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        output = files.AtomicOutput(str(tmp_path / name))
        output.write(RAW)
        output.commit()
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_outputs_and_small_files_on_s3(s3_server, monkeypatch, tmp_path) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.bucket}/files/out/o.jsonl.gz"
    output = files.AtomicOutput(url)
    output.write(RAW)
    assert not files.exists(url), "nothing is uploaded before commit"
    output.commit()
    fetched = tmp_path / "o.jsonl.gz"
    s3_server.client().download_file(s3_server.bucket, "files/out/o.jsonl.gz", str(fetched))
    assert read_jsonl(fetched) == ROWS
    marker = f"s3://{s3_server.bucket}/files/meta/a.done"
    assert read_small(marker) is None
    files.write_small(marker, b"{}\n")
    assert read_small(marker) == b"{}\n"


def test_small_files_locally(tmp_path) -> None:
    path = str(tmp_path / "meta" / "x.done")
    assert read_small(path) is None
    files.write_small(path, b"done\n")
    assert read_small(path) == b"done\n" and files.size_of(path) == 5 and files.exists(path)


def test_expand_takes_a_documents_folder_as_its_json_files(tmp_path) -> None:
    for name in ("documents/a.jsonl.gz", "documents/sub/b.json", "documents/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert files.expand([str(tmp_path / "documents")]) == [
        str(tmp_path / "documents/a.jsonl.gz"), str(tmp_path / "documents/sub/b.json")
    ]
    with pytest.raises(CurateError, match="matches no files"):
        files.expand([str(tmp_path / "documents" / "*.zst")])


def test_compression_of() -> None:
    assert [files.compression_of(p) for p in ("a.gz", "a.gzip", "a.zst", "a.zstd", "a.jsonl")] == [
        "gz", "gz", "zst", "zst", ""
    ]
