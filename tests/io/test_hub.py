"""Hub roots on feedline's own range client (feedline/io/hub.py), against the Hub-contract server.

The server (tests/hubserver.py) is checked by huggingface_hub's own client in test_hubserver.py;
here feedline reads it: commits, the tree, located files, faults and where the token goes.
"""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest

from feedline.io import (
    HubStore,
    NotFoundError,
    ObjectChangedError,
    StoreUnavailableError,
    open_store,
)
from tests.hubserver import HubServer

BIG = os.urandom(300_000)  # LFS: redirected to the CDN origin
SMALL = b'{"codebase_version": "v3.0", "fps": 10}\n'  # a regular file: served by the Hub itself
TOKEN = "hf_feedlinetestsecret"


def _folder(tmp_path: Path, name: str = "repo", files: int = 3, big: bytes = BIG) -> Path:
    root = tmp_path / name
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_bytes(SMALL)
    (root / "data").mkdir()
    for i in range(files):
        (root / "data" / f"file-{i:03d}.parquet").write_bytes(big[i:])
    return root


def _hub_paths(hub: HubServer, part: str) -> list[str]:
    return [p for _m, p, _r, _a in hub.hub_requests() if part in p]


def test_revision_is_resolved_once_and_reads_name_the_commit(hub: HubServer, tmp_path: Path) -> None:
    first = hub.add_dataset("feedline/commit", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/commit")
    assert isinstance(store, HubStore) and store.commit == first
    assert store.read_range("data/file-001.parquet", 100, 200) == BIG[101:201]
    assert store.read_range("meta/info.json", 2, 10) == SMALL[2:10]
    moved = hub.move_branch("feedline/commit", _folder(tmp_path, "v2", 1, big=BIG[::-1]))
    # the branch moved: this store still reads its commit, byte for byte
    assert store.read_range("data/file-000.parquet", 0, 50) == BIG[:50]
    assert store.pinned_url == f"hf://datasets/feedline/commit@{first}"
    assert len(_hub_paths(hub, "/revision/")) == 1
    assert all(f"/resolve/{first}/" in p for p in _hub_paths(hub, "/resolve/"))
    again = open_store("hf://datasets/feedline/commit@main")
    assert again.commit == moved and again.read_range("data/file-000.parquet", 0, 50) == BIG[::-1][:50]
    assert not again.exists("data/file-002.parquet")
    # a worker's copy (pickled, or reopened at pinned_url) reads the same commit, asking nothing
    hub.clear()
    for clone in (pickle.loads(pickle.dumps(store)), open_store(store.pinned_url)):
        assert clone.commit == first
        assert clone.read_range("data/file-002.parquet", 0, 10) == BIG[2:12]
    assert _hub_paths(hub, "/revision/") == []


def test_tree_is_paginated_and_kept_once_per_node(hub: HubServer, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_dataset("feedline/listing", _folder(tmp_path, files=7))
    monkeypatch.setattr(hub, "page_size", 3)
    store = open_store("hf://datasets/feedline/listing")
    listed = store.list()
    assert [i.path for i in listed] == [f"data/file-{i:03d}.parquet" for i in range(7)] + ["meta/info.json"]
    assert store.stat("data/file-003.parquet").size == len(BIG) - 3
    assert listed[0].fingerprint == f"hf:{hub.repos['feedline/listing'].commits[store.commit].blobs['data/file-000.parquet'].sha256}"
    assert [i.path for i in store.list("data")][:2] == ["data/file-000.parquet", "data/file-001.parquet"]
    with pytest.raises(NotFoundError, match="data/absent.parquet"):
        store.stat("data/absent.parquet")
    tree_pages = len(_hub_paths(hub, "/tree/"))
    assert tree_pages == 4  # 7 + 2 directories + 1 file, 3 a page (directories are listed too)
    hub.clear()
    other = open_store("hf://datasets/feedline/listing")  # another process of the node
    assert len(other.list()) == 8
    assert _hub_paths(hub, "/tree/") == [] and len(_hub_paths(hub, "/revision/")) == 1


def test_a_server_that_ignores_range_still_gives_the_exact_bytes(hub: HubServer, tmp_path: Path) -> None:
    """huggingface_hub's HfFileSystem returns the file's first bytes here (test_hubserver.py)."""
    hub.add_dataset("feedline/norange", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/norange", subranges=3, max_connections=4)
    store.client.min_subrange_bytes = 10_000
    hub.add_fault("ignore_range", count=100)
    assert store.read_range("data/file-000.parquet", 120_000, 120_100) == BIG[120_000:120_100]
    assert store.read_range("meta/info.json", 5, 9) == SMALL[5:9]
    assert store.read_ranges("data/file-001.parquet", [(1, 50_000), (200_000, 260_000)]) == [
        BIG[2:50_001], BIG[200_001:260_001]
    ]
    hub.clear()
    assert store.read_range("data/file-002.parquet", 0, 90_000) == BIG[2:90_002]
    ranges = [r for _m, _p, r, _a in hub.hub_requests("cdn") if r]
    assert len(ranges) == 3  # three sub-ranges of one read, each answered 206


def test_429_and_503_honour_retry_after_up_to_the_outage_limit(hub: HubServer, tmp_path: Path) -> None:
    hub.add_dataset("feedline/polite", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/polite")
    hub.add_fault("status", code=429, retry_after="2", count=1, where="/revision/")
    began = time.monotonic()
    assert store.commit  # the API call waited the 2 s asked for, then asked again
    assert time.monotonic() - began >= 1.9
    hub.add_fault("status", code=503, retry_after="1", count=1, where="/lfs/")
    began = time.monotonic()
    assert store.read_range("data/file-000.parquet", 10, 20) == BIG[10:20]
    assert time.monotonic() - began >= 0.9
    hub.add_fault("status", code=502, count=2)  # no Retry-After: the policy's own backoff
    assert store.read_range("data/file-001.parquet", 10, 20) == BIG[11:21]
    hub.clear()
    store.set_outage_s(2)
    hub.add_fault("status", code=429, retry_after="3600", count=1000)
    with pytest.raises(StoreUnavailableError) as info:
        store.read_range("data/file-002.parquet", 0, 10)
    text = str(info.value)
    assert "\n" not in text and "429" in text and "outage_s=2" in text


def test_a_truncated_body_is_retried_to_the_exact_bytes(hub: HubServer, tmp_path: Path) -> None:
    hub.add_dataset("feedline/cut", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/cut")
    hub.add_fault("truncate", after_bytes=1000, count=2, where="/lfs/")
    assert store.read_range("data/file-000.parquet", 0, 200_000) == BIG[:200_000]


def test_an_etag_that_changes_is_never_read_as_the_same_file(hub: HubServer, tmp_path: Path) -> None:
    """Reads are pinned (If-Match and the answer's ETag) to the ETag the location answered. A
    location whose ETag changed is located again once; changed again, the read fails, no bytes."""
    hub.add_dataset("feedline/etag", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/etag")
    assert store.read_range("data/file-000.parquet", 0, 10) == BIG[:10]
    hub.add_fault("etag", count=1, where="/lfs/")  # one answer with another ETag: located again
    assert store.read_range("data/file-000.parquet", 10, 20) == BIG[10:20]
    hub.add_fault("etag", count=2, where="/lfs/")  # the GET, and the new location's HEAD
    with pytest.raises(ObjectChangedError, match="file-000.parquet"):
        store.read_range("data/file-000.parquet", 20, 30)


def test_missing_repositories_revisions_and_files_are_one_line(hub: HubServer, tmp_path: Path) -> None:
    hub.add_dataset("feedline/missing", _folder(tmp_path))
    with pytest.raises(NotFoundError) as info:
        open_store("hf://datasets/feedline/nope").stat("meta/info.json")
    assert "hf://datasets/feedline/nope" in str(info.value) and "HF_TOKEN" in str(info.value)
    with pytest.raises(NotFoundError, match="no revision 'v9'"):
        open_store("hf://datasets/feedline/missing@v9").list()
    with pytest.raises(NotFoundError, match="absent.json"):
        open_store("hf://datasets/feedline/missing").read_range("absent.json", 0, 1)


def test_the_token_goes_to_the_hub_only_and_is_written_nowhere(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CDN is 127.0.0.1 too, on another port: only scheme, host AND port make an origin."""
    hub.add_dataset("feedline/token", _folder(tmp_path))
    home = tmp_path / "home"
    monkeypatch.setenv("FEEDLINE_HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    store = open_store("hf://datasets/feedline/token")
    assert store.read_range("data/file-000.parquet", 5, 15) == BIG[5:15]
    assert store.read_range("meta/info.json", 0, 4) == SMALL[:4]
    with store.open("data/file-001.parquet") as handle:
        handle.seek(1000)
        assert handle.read(10) == BIG[1001:1011]
    hub_auth = {a for _m, _p, _r, a in hub.hub_requests("hub")}
    cdn = hub.hub_requests("cdn")
    assert hub_auth == {f"Bearer {TOKEN}"}
    assert cdn and all(a is None for _m, _p, _r, a in cdn)
    assert TOKEN not in repr(store) and TOKEN not in store.url("meta/info.json")
    written = [p for p in home.rglob("*") if p.is_file()]
    assert written and not any(TOKEN.encode() in p.read_bytes() for p in written)
    hub.clear()
    monkeypatch.delenv("HF_TOKEN")
    explicit = open_store("hf://datasets/feedline/token", token="hf_fromoptions")
    assert explicit.read_range("data/file-002.parquet", 0, 3) == BIG[2:5]
    assert {a for _m, _p, _r, a in hub.hub_requests("hub")} == {"Bearer hf_fromoptions"}
    hub.clear()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    none = open_store("hf://datasets/feedline/token", token=False)
    assert none.read_range("meta/info.json", 0, 3) == SMALL[:3]
    assert {a for _m, _p, _r, a in hub.hub_requests("hub")} == {None}


def test_unknown_storage_options_are_one_line() -> None:
    from feedline.io import StoreError

    with pytest.raises(StoreError, match=r"unknown Hub storage options \['anon'\]"):
        open_store("hf://datasets/o/n", anon=True)


def test_a_download_resumes_from_an_offset_and_a_write_is_a_commit(hub: HubServer, tmp_path: Path) -> None:
    """``open_from`` (what ``feedline download`` reads with) from the file's location, and
    ``write_bytes`` as one commit on the store's branch."""
    first = hub.add_dataset("feedline/stream", _folder(tmp_path))
    store = open_store("hf://datasets/feedline/stream", token="hf_writer")
    seen = store.validator("data/file-000.parquet")
    assert seen.size == len(BIG) and seen.strong_etag
    body = store.open_from("data/file-000.parquet", 250_000, seen)
    assert (body.start, body.total, body.why_restart) == (250_000, len(BIG), "")
    view = memoryview(bytearray(len(BIG)))
    got = 0
    while n := body.readinto(view[got:]):
        got += n
    body.close()
    assert bytes(view[:got]) == BIG[250_000:]
    assert all(a is None for _m, _p, _r, a in hub.hub_requests("cdn"))
    store.write_bytes("meta/added.json", b"{}")
    assert hub.sha("feedline/stream") != first
    assert open_store("hf://datasets/feedline/stream").read_bytes("meta/added.json") == b"{}"
    assert any(a == "Bearer hf_writer" for _m, p, _r, a in hub.hub_requests() if "/commit/" in p)
