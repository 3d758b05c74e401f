"""A bounded pool of keep-alive ``http.client`` connections for ranged GETs.

Random-access readers (the MP4 sidecar path, Parquet footers) issue thousands of small ranged
requests, where per-request overhead dominates: on 127.0.0.1 urllib3 spends ~2.5x the time of a
bare ``http.client`` request on the same connection (bench/io_ranges.py). So ranged reads use
this thin pool: at most ``max_connections`` connections in use, idle ones kept per host, and a
connection is reused only when its previous answer was read to the end.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from urllib.parse import SplitResult

HostKey = tuple[str, str, int]


class ConnectionPool:
    def __init__(self, max_connections: int, timeout_s: float) -> None:
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._idle: dict[HostKey, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    @staticmethod
    def key(parts: SplitResult) -> HostKey:
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        return scheme, parts.hostname or "", port

    def acquire(self, key: HostKey) -> http.client.HTTPConnection:
        """A connection to ``key``; blocks while ``max_connections`` are in use."""
        self._slots.acquire()
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop()
        scheme, host, port = key
        try:
            if scheme == "https":
                if self._ssl is None:
                    self._ssl = ssl.create_default_context()
                return http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=self._ssl)
            return http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        except BaseException:
            self._slots.release()
            raise

    def release(self, key: HostKey, conn: http.client.HTTPConnection, reuse: bool) -> None:
        """Give the slot back; keep ``conn`` for the next request only if ``reuse``."""
        try:
            if reuse:
                with self._lock:
                    self._idle.setdefault(key, []).append(conn)
            else:
                conn.close()
        finally:
            self._slots.release()

    def drop_idle(self, key: HostKey) -> None:
        """Close the idle connections to ``key``: after one failed, the server (or the path to
        it) went away, and the others are dead too."""
        with self._lock:
            idle = self._idle.pop(key, [])
        for conn in idle:
            conn.close()

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()
