"""Fingerprints: a replaced object is a different object, even at the same size."""

from __future__ import annotations

import os
import time

from feedline.io import open_store


def test_s3_same_size_replacement_changes_fingerprint(s3_server) -> None:
    store = open_store(f"s3://{s3_server.bucket}/fp", **s3_server.storage_options)
    store.write_bytes("v.mp4", b"A" * 4096)
    first = store.stat("v.mp4")
    store.write_bytes("v.mp4", b"B" * 4096)
    second = store.stat("v.mp4")
    assert first.size == second.size
    assert first.fingerprint and second.fingerprint
    assert first.fingerprint != second.fingerprint
    assert first.version_id and second.version_id and first.version_id != second.version_id
    listed = {info.path: info for info in store.list()}
    assert listed["v.mp4"].fingerprint == second.fingerprint, "stat and a fresh listing must agree"


def test_http_strong_etag_is_fingerprint(nginx_server) -> None:
    path = nginx_server.root / "fp.bin"
    path.write_bytes(b"x" * 1000)
    store = open_store(nginx_server.url)
    first = store.stat("fp.bin")
    assert first.fingerprint == f"http:{first.etag}"
    path.write_bytes(b"y" * 1000)
    later = time.time() + 5
    os.utime(path, (later, later))  # nginx's ETag is mtime-size: a new mtime is a new object
    assert store.stat("fp.bin").fingerprint != first.fingerprint


def test_http_without_etag_has_no_fingerprint(nginx_server) -> None:
    (nginx_server.root / "fp2.bin").write_bytes(b"z" * 10)
    info = open_store(nginx_server.noetag_url).stat("fp2.bin")
    assert info.etag is None and info.fingerprint is None and info.size == 10


def test_memory_store_has_no_identity() -> None:
    store = open_store("memory://fp-tests")
    store.write_bytes("a", b"1")
    assert store.stat("a").fingerprint is None
