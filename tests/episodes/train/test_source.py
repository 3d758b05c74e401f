"""The source check: a dataset answers, a missing one and a silent endpoint are one line, fast."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from feedline.episodes.errors import TrainError
from feedline.episodes.train.source import check_source, source_url


def test_source_url_resolves_like_the_reader() -> None:
    from feedline.episodes.base import resolve_root

    cases = [("o/n", None, "dataset", None), ("o/n", None, "dataset", "v1"), ("o/b", None, "bucket", None),
             ("o/n", "/data/ds", "dataset", None), (None, "http://h/ds", "dataset", None)]
    for repo_id, root, repo_type, revision in cases:
        assert source_url(repo_id, root, repo_type, revision) == resolve_root(repo_id, root, repo_type, revision)
    assert source_url(None, None) is None


def test_a_folder_with_and_without_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "ds" / "meta").mkdir(parents=True)
    (tmp_path / "ds" / "meta" / "info.json").write_text("{}")
    check_source(str(tmp_path / "ds"))
    with pytest.raises(TrainError, match="no LeRobot dataset there"):
        check_source(str(tmp_path / "empty"))


def test_missing_dataset_over_http(nginx_server) -> None:
    with pytest.raises(TrainError, match="no LeRobot dataset there") as info:
        check_source(f"{nginx_server.url}/no-such-dataset")
    assert "\n" not in str(info.value)


def test_an_endpoint_that_never_answers_is_given_up_on_time() -> None:
    # a real listening socket that accepts and never answers (the fault cannot be caused otherwise)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = server.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(TrainError, match="no answer within 1 s"):
            check_source(f"http://127.0.0.1:{port}/ds", timeout_s=1.0)
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
