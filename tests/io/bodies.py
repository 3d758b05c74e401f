"""Reading a whole ``io.body.Body`` in tests: the loop every ``open_from`` test needs once."""

from __future__ import annotations

from typing import Any


def read_all(body: Any) -> bytes:
    """Every byte ``body`` gives, read 64 KiB at a time, then the body closed."""
    out = bytearray()
    buffer = memoryview(bytearray(64 << 10))
    while n := body.readinto(buffer):
        out += buffer[:n]
    body.close()
    return bytes(out)
