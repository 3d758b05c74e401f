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
from tests.servers import run_nginx


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
