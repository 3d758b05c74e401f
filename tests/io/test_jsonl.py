"""stream_jsonl: every format, local and remote, bad lines, truncation, bounded memory."""

from __future__ import annotations

import gzip
import random
import tracemalloc
from pathlib import Path

import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.io.errors import CorpusFormatError, IoError
from feedline.io.jsonl import JsonlStream, jsonl_stem, kept_shard_names, stream_jsonl


def make_docs(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "ε", "日本語", 'z"q', "back\\slash"]
    return [
        {"id": f"doc-{i}", "text": " ".join(rng.choices(words, k=rng.randint(0, 60))), "n": i}
        for i in range(n)
    ]


def encode(docs: list[dict]) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def write(path: Path, raw: bytes) -> Path:
    if path.name.endswith(".zst"):
        raw = zstandard.ZstdCompressor(write_checksum=True).compress(raw)
    elif path.name.endswith(".gz"):
        raw = gzip.compress(raw)
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst"])
def test_round_trip_each_format(tmp_path, name):
    docs = make_docs(3000)
    stream = stream_jsonl(write(tmp_path / name, encode(docs)))
    assert list(stream) == docs
    assert (stream.documents, stream.lines, stream.bad_lines) == (3000, 3000, 0)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(0, 200),
    read_bytes=st.integers(1, 4096),
    fmt=st.sampled_from(["jsonl", "jsonl.gz", "jsonl.zst"]),
    trailing_newline=st.booleans(),
)
def test_any_read_size_gives_the_same_documents(tmp_path, n, read_bytes, fmt, trailing_newline):
    docs = make_docs(n, seed=n)
    raw = encode(docs)
    if not trailing_newline and raw:
        raw = raw[:-1]
    path = write(tmp_path / f"h.{fmt}", raw)
    assert list(JsonlStream(path, read_bytes=read_bytes)) == docs


def test_multi_frame_zstd_and_multi_member_gzip(tmp_path):
    docs = make_docs(500)
    first, second = encode(docs[:200]), encode(docs[200:])
    cctx = zstandard.ZstdCompressor()
    (tmp_path / "m.jsonl.zst").write_bytes(cctx.compress(first) + cctx.compress(second))
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(first) + gzip.compress(second))
    assert list(stream_jsonl(tmp_path / "m.jsonl.zst")) == docs
    assert list(stream_jsonl(tmp_path / "m.jsonl.gz")) == docs


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.jsonl.zst"])
def test_truncated_compressed_stream_is_an_error(tmp_path, name):
    path = write(tmp_path / name, encode(make_docs(4000)))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 7])
    with pytest.raises(CorpusFormatError, match=rf"{name}: truncated (gzip|zstd) stream"):
        for _ in stream_jsonl(path):
            pass


def test_corrupt_zstd_is_an_error(tmp_path):
    path = write(tmp_path / "c.jsonl.zst", encode(make_docs(2000)))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusFormatError, match="c.jsonl.zst"):
        for _ in stream_jsonl(path):
            pass


def test_malformed_line_names_file_and_line(tmp_path):
    raw = encode(make_docs(10)) + b'{"id": "broken", "text": \n' + encode(make_docs(5))
    path = write(tmp_path / "bad.jsonl.zst", raw)
    with pytest.raises(CorpusFormatError, match=r"bad.jsonl.zst: line 11: invalid JSON"):
        list(stream_jsonl(path))
    stream = stream_jsonl(path, skip_bad_lines=True)
    assert len(list(stream)) == 15
    assert (stream.bad_lines, stream.lines) == (1, 16)


def test_non_object_line_and_blank_lines(tmp_path):
    raw = b'{"id": 1}\n\n   \n[1, 2]\n{"id": 2}'
    path = write(tmp_path / "odd.jsonl", raw)
    with pytest.raises(
        CorpusFormatError, match="odd.jsonl: line 4: expected a JSON object, got list"
    ):
        list(stream_jsonl(path))
    stream = stream_jsonl(path, skip_bad_lines=True)
    assert list(stream) == [{"id": 1}, {"id": 2}]
    assert stream.bad_lines == 1


def test_missing_file(tmp_path):
    with pytest.raises(CorpusFormatError, match="no such file"):
        list(stream_jsonl(tmp_path / "absent.jsonl"))


def test_memory_is_bounded_by_the_buffers_not_the_shard(tmp_path):
    docs = make_docs(60_000)  # ~14 MB of JSON
    raw = encode(docs)
    path = write(tmp_path / "big.jsonl.zst", raw)
    del docs
    tracemalloc.start()
    try:
        count = sum(1 for _ in stream_jsonl(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 60_000
    assert len(raw) > 12 << 20
    assert peak < 6 << 20, (
        f"peak {peak / 1e6:.1f} MB while streaming a {len(raw) / 1e6:.1f} MB shard"
    )


def test_http_and_s3_sources(tmp_path, nginx_server, s3_server):
    docs = make_docs(2500)
    write(nginx_server.root / "remote.jsonl.zst", encode(docs))
    assert list(stream_jsonl(f"{nginx_server.url}/remote.jsonl.zst")) == docs
    body = gzip.compress(encode(docs))
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="corpus/r.jsonl.gz", Body=body)
    stream = stream_jsonl(
        f"s3://{s3_server.bucket}/corpus/r.jsonl.gz", storage_options=s3_server.storage_options
    )
    assert list(stream) == docs


def test_remote_missing_object(nginx_server):
    with pytest.raises(CorpusFormatError, match="404"):
        list(stream_jsonl(f"{nginx_server.url}/nothing-here.jsonl"))


def test_kept_shard_names_drop_the_suffix_unless_two_shards_share_a_stem():
    assert kept_shard_names(["c4-000.json.gz", "d/b.jsonl"]) == ["c4-000.jsonl.zst", "d/b.jsonl.zst"]
    assert kept_shard_names(["a.jsonl", "a.jsonl.gz", "b.jsonl.zst"]) == [
        "a.jsonl.jsonl.zst", "a.jsonl.gz.jsonl.zst", "b.jsonl.zst"
    ]
    # the full-name fallback can meet another shard's stem: an error naming both, never a silent overwrite
    with pytest.raises(IoError, match=r"a\.jsonl and a\.jsonl\.jsonl would both be written as a\.jsonl\.jsonl\.zst"):
        kept_shard_names(["a.jsonl", "a.jsonl.gz", "a.jsonl.jsonl"])


@given(st.lists(
    st.builds("".join, st.lists(st.sampled_from(["a", "b", "/", ".jsonl", ".gz", ".json", ".zst"]), min_size=1, max_size=5)),
    unique=True, max_size=8,
))
def test_kept_shard_names_are_distinct_or_an_error(names):
    """Distinct inputs never share an output name; where the rule cannot keep them apart it says so."""
    stems = [jsonl_stem(n) for n in names]
    try:
        out = kept_shard_names(names)
    except IoError:
        assert len(set(stems)) < len(stems)  # only a shared stem sends a name down the fallback
        return
    assert len(set(out)) == len(out) and all(n.endswith(".jsonl.zst") for n in out)
    if len(set(stems)) == len(stems):
        assert out == [s + ".jsonl.zst" for s in stems]
