"""ConnectionPool: at most max_connections in use, waiters served on release, reuse only when told."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from feedline.io.http.connections import ConnectionPool


def test_keys_name_scheme_host_and_default_port() -> None:
    assert ConnectionPool.key(urlsplit("HTTP://Example.org/x")) == ("http", "example.org", 80)
    assert ConnectionPool.key(urlsplit("https://h/x")) == ("https", "h", 443)
    assert ConnectionPool.key(urlsplit("http://h:8080/x")) == ("http", "h", 8080)


def test_a_request_beyond_the_bound_waits_for_a_release(nginx_server) -> None:
    pool = ConnectionPool(max_connections=2, timeout_s=5)
    key = ConnectionPool.key(urlsplit(nginx_server.url))
    first, second = pool.acquire(key), pool.acquire(key)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(key)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got, "a third connection must wait while two are in use"
    pool.release(key, first, reuse=True)
    waiter.join(5)
    assert got == [first], "the waiter gets the connection that was given back"
    pool.release(key, second, reuse=False)
    pool.release(key, got[0], reuse=False)
    pool.clear()


def test_reuse_keeps_a_live_connection_and_no_reuse_closes_it(nginx_server) -> None:
    (nginx_server.root / "conn.txt").write_bytes(b"hello")
    pool = ConnectionPool(max_connections=1, timeout_s=5)
    key = ConnectionPool.key(urlsplit(nginx_server.url))
    conn = pool.acquire(key)
    conn.request("GET", "/conn.txt")
    assert conn.getresponse().read() == b"hello"
    pool.release(key, conn, reuse=True)
    again = pool.acquire(key)
    assert again is conn and again.sock is not None, "the same open socket serves the next request"
    again.request("GET", "/conn.txt")
    assert again.getresponse().read() == b"hello"
    pool.release(key, again, reuse=False)
    assert again.sock is None, "a connection not fit for reuse is closed"
    fresh = pool.acquire(key)
    assert fresh is not conn
    pool.release(key, fresh, reuse=True)
    pool.clear()
    assert fresh.sock is None and pool._idle == {}
