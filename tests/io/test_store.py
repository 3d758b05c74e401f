"""Every store returns exactly the file's bytes for any range, and fingerprints track identity."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.io import NotFoundError, RangeError, Store, StoreError, open_store

PAYLOAD = os.urandom(300_000)
NAME = "data/blob.bin"
STORES = ["local", "memory", "nginx", "nginx-norange", "s3"]


@pytest.fixture(scope="module", params=STORES)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    kind = request.param
    if kind == "local":
        root = tmp_path_factory.mktemp("local")
        (root / "data").mkdir()
        (root / NAME).write_bytes(PAYLOAD)
        yield open_store(str(root))
    elif kind == "memory":
        store = open_store(f"memory://feedline-tests-{os.getpid()}")
        store.write_bytes(NAME, PAYLOAD)
        yield store
    elif kind.startswith("nginx"):
        nginx = request.getfixturevalue("nginx_server")
        (nginx.root / "data").mkdir(exist_ok=True)
        (nginx.root / NAME).write_bytes(PAYLOAD)
        yield open_store(nginx.norange_url if kind == "nginx-norange" else nginx.url, max_connections=4)
    else:
        s3 = request.getfixturevalue("s3_server")
        store = open_store(f"s3://{s3.bucket}/ranges", **s3.storage_options)
        store.write_bytes(NAME, PAYLOAD)
        yield store


ranges = st.integers(0, len(PAYLOAD)).flatmap(
    lambda start: st.tuples(st.just(start), st.integers(start, min(len(PAYLOAD), start + 70_000)))
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(r=ranges)
def test_read_range_equals_slice(store: Store, r: tuple[int, int]) -> None:
    start, end = r
    assert store.read_range(NAME, start, end) == PAYLOAD[start:end]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rs=st.lists(ranges, min_size=0, max_size=12))
def test_read_ranges_equal_slices(store: Store, rs: list[tuple[int, int]]) -> None:
    assert store.read_ranges(NAME, rs) == [PAYLOAD[s:e] for s, e in rs]


def test_edges(store: Store) -> None:
    n = len(PAYLOAD)
    assert store.read_range(NAME, 0, 0) == b""
    assert store.read_range(NAME, n, n) == b""
    assert store.read_range(NAME, n - 1, n) == PAYLOAD[-1:]
    assert store.read_range(NAME, 0, n) == PAYLOAD
    assert store.read_bytes(NAME) == PAYLOAD
    assert store.stat(NAME).size == n


def test_past_end_is_a_clear_error(store: Store) -> None:
    n = len(PAYLOAD)
    for start, end in [(n - 10, n + 1), (n + 5, n + 10)]:
        with pytest.raises(RangeError, match="blob.bin"):
            store.read_range(NAME, start, end)


def test_missing_object_fails_fast_naming_it(store: Store) -> None:
    began = time.monotonic()
    with pytest.raises(NotFoundError, match="missing.bin"):
        store.stat("data/missing.bin")
    with pytest.raises(NotFoundError, match="missing.bin"):
        store.read_range("data/missing.bin", 0, 10)
    assert time.monotonic() - began < 2.0, "a 404 must not go through the retry backoff"


def test_open_is_seekable_file(store: Store) -> None:
    with store.open(NAME) as handle:
        handle.seek(1000)
        assert handle.read(10) == PAYLOAD[1000:1010]
        handle.seek(-5, os.SEEK_END)
        assert handle.read() == PAYLOAD[-5:]


@pytest.mark.parametrize("bad", ["../etc/passwd", "data/../../x", "/abs/path", "a\\b"])
def test_paths_cannot_escape_the_root(store: Store, bad: str) -> None:
    with pytest.raises(StoreError, match="root|relative"):
        store.read_range(bad, 0, 1)


def test_local_list_and_fingerprint(tmp_path: os.PathLike[str]) -> None:
    store = open_store(str(tmp_path))
    store.write_bytes("a/x.bin", b"one")
    store.write_bytes("b.bin", b"two")
    assert [info.path for info in store.list()] == ["a/x.bin", "b.bin"]
    before = store.stat("b.bin").fingerprint
    store.write_bytes("b.bin", b"owt")  # same size, replaced
    assert store.stat("b.bin").fingerprint != before
    assert store.local_path("b.bin") == os.path.join(str(tmp_path), "b.bin")


def test_http_cannot_list(nginx_server) -> None:
    with pytest.raises(StoreError, match="cannot list"):
        open_store(nginx_server.url).list()


def test_url_never_carries_credentials() -> None:
    store = open_store("https://user:secret@example.invalid/root?token=abc")
    assert "secret" not in store.url("x") and "token" not in store.url("x")
    assert "secret" not in repr(store)


def test_stores_pickle_for_dataloader_workers(store: Store) -> None:
    import pickle

    if store.root_url.startswith("memory://"):
        pytest.skip("a memory store lives in one process by design")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.read_range(NAME, 10, 20) == PAYLOAD[10:20]
    assert clone.root_url == store.root_url


def test_hub_store_is_constructed_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub cannot be reached from the test machines: construction and the offline error only."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: another test may have imported it already
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    store = open_store("hf://datasets/owner/name@main")
    assert store.root_url == "hf://datasets/owner/name@main"
    assert store.url("meta/info.json") == "hf://datasets/owner/name@main/meta/info.json"
    began = time.monotonic()
    with pytest.raises(StoreError) as info:
        store.stat("meta/info.json")
    assert "\n" not in str(info.value) and "meta/info.json" in str(info.value)
    assert time.monotonic() - began < 5.0


def test_local_open_from_resumes_only_the_same_file(tmp_path) -> None:
    """A local file's validator is its fingerprint (inode + mtime + size) and mtime."""
    data = os.urandom(100_000)
    (tmp_path / "obj.bin").write_bytes(data)
    with open_store(str(tmp_path)) as store:
        seen = store.validator("obj.bin")
        assert seen.etag and seen.etag.startswith("local:") and seen.size == len(data)
        body = store.open_from("obj.bin", 60_000, seen)
        assert (body.start, body.total, body.why_restart) == (60_000, len(data), "")
        assert body.readinto(memoryview(bytearray(len(data)))) == len(data) - 60_000
        body.close()
        (tmp_path / "obj.bin").write_bytes(data[::-1])
        later = time.time() + 5
        os.utime(tmp_path / "obj.bin", (later, later))
        body = store.open_from("obj.bin", 60_000, seen)
        buffer = bytearray(len(data))
        assert body.start == 0 and "changed" in body.why_restart
        assert body.readinto(memoryview(buffer)) == len(data) and bytes(buffer) == data[::-1]
        body.close()
        with pytest.raises(RangeError) as info:
            store.open_from("obj.bin", len(data) + 1, store.validator("obj.bin"))
        assert info.value.total == len(data)
        with pytest.raises(NotFoundError, match="no such object"):
            store.open_from("absent.bin")
