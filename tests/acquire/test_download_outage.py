"""A download rides out a real server outage under the io default policy (``outage_s`` 60 s).

A private nginx is really stopped (its port refuses connections) and started again on the same
port after 2 s; the download started during the outage ends with the exact file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

from feedline.acquire.download import download_shard
from tests.cli import run_feedline
from tests.servers import free_port, run_nginx


def test_download_started_during_an_outage_completes_when_the_server_is_back(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="feedline.io.retry")
    data = os.urandom(3 << 20)
    with run_nginx(tmp_path / "nginx") as server:
        (server.root / "shard.bin").write_bytes(data)
        server.stop()
        restart = threading.Timer(2.0, server.start)
        restart.start()
        began = time.monotonic()
        try:
            result = download_shard(f"{server.url}/shard.bin", tmp_path / "shard.bin")
        finally:
            restart.join()
        took = time.monotonic() - began
    assert (tmp_path / "shard.bin").read_bytes() == data
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert 2.0 <= took < 2.0 + 5.0
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1 and server.url in warnings[0], warnings
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_a_refused_url_gives_up_within_the_outage_limit_of_every_store(tmp_path):
    """``FEEDLINE_OUTAGE_S=5`` bounds a download as it bounds every store: a port that refuses
    (nothing listens on it) ends the command within 10 s, with one line naming the URL (it took
    94 s when the download's own loop kept the 60 s default)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/shard.jsonl.gz"
    began = time.monotonic()
    proc = run_feedline("download", url, "--out", str(tmp_path / "out"), env={"FEEDLINE_OUTAGE_S": "5"})
    took = time.monotonic() - began
    assert proc.returncode != 0
    assert 5.0 <= took < 10.0, took
    assert url in proc.stderr and "Connection refused" in proc.stderr, proc.stderr
