"""Reading nginx's access log in tests: which requests reached the server for one file."""

from __future__ import annotations

import time
from typing import Any


def requests_for(nginx_server: Any, name: str, expect: int, timeout_s: float = 10.0) -> list[tuple[str, int, str]]:
    """(method, status, Range header) of the logged requests for ``name``, once ``expect`` of them
    are there: nginx logs a request after its last byte is sent, so a fast client can be earlier.

    Give each test a file name of its own, so the lines are only its requests.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        out = []
        for line in nginx_server.log_lines():
            request, rest = line[1:].split('" ', 1)
            status, _sent, rng = rest.split(" ", 2)
            if f"/{name} " in request:
                out.append((request.split()[0], int(status), rng.strip('"')))
        if len(out) >= expect or time.monotonic() > deadline:
            return out
        time.sleep(0.02)
