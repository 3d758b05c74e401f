"""``PinnedStore``: a view of a store in which each object stays the one first seen.

A reader that opened a dataset has already stat'ed its files (a footer read opens the file, an
index records each video's size and fingerprint). Stat'ing them again before every later read
costs a request each (a HEAD over HTTP) and tells nothing new. Through this view the first stat
of a path *pins* it; later stats answer from the pin, and opens and reads of a pinned path are
pinned to it (:meth:`Store.read_ranges_pinned <feedline.io.store.Store.read_ranges_pinned>`): a
replaced object fails with :class:`~feedline.io.errors.ObjectChangedError` instead of handing
out bytes of another object. The pins are a plain dict of :class:`~feedline.io.store.ObjectInfo`,
so a process can ship them (pickled) to its workers.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import IO

from feedline.io.body import Body, ObjectValidator
from feedline.io.store import ObjectInfo, Store


class PinnedStore(Store):
    """``inner`` seen through ``pins`` (path -> the object pinned), filled by first stats.

    Args:
        inner: the store read from.
        pins: the pins to start from, updated in place as new paths are stat'ed. Default
            ``None``: none yet.
    """

    def __init__(self, inner: Store, pins: MutableMapping[str, ObjectInfo] | None = None) -> None:
        self.inner = inner
        self.pins: MutableMapping[str, ObjectInfo] = {} if pins is None else pins
        self.root_url = inner.root_url
        self.max_connections = inner.max_connections
        self.coarse_validators = inner.coarse_validators

    def clean_path(self, path: str) -> str:
        return self.inner.clean_path(path)

    def url(self, path: str = "") -> str:
        return self.inner.url(path)

    def local_path(self, path: str) -> str | None:
        return self.inner.local_path(path)

    def stat(self, path: str) -> ObjectInfo:
        """The pinned object of ``path``; a path seen for the first time is stat'ed and pinned."""
        key = self.clean_path(path)
        pin = self.pins.get(key)
        if pin is None:
            pin = self.pins[key] = self.inner.stat(path)
        return pin

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self.inner.list(prefix)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return self.read_ranges(path, [(start, end)])[0]

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        return self.inner.read_ranges_pinned(path, ranges, self.stat(path))

    def read_ranges_pinned(
        self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo
    ) -> list[bytes]:
        return self.inner.read_ranges_pinned(path, ranges, pin)

    def check_pin(self, path: str, pin: ObjectInfo) -> None:
        self.inner.check_pin(path, pin)

    def open(self, path: str) -> IO[bytes]:
        return self.inner.open_pinned(path, self.stat(path))

    def open_pinned(self, path: str, pin: ObjectInfo) -> IO[bytes]:
        return self.inner.open_pinned(path, pin)

    def validator(self, path: str) -> ObjectValidator:
        return self.inner.validator(path)

    def open_from(self, path: str, offset: int = 0, validator: ObjectValidator | None = None) -> Body:
        return self.inner.open_from(path, offset, validator)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.inner.write_bytes(path, data)

    def close(self) -> None:
        """The view owns nothing: the inner store stays open (its owner closes it)."""
        return None

    def set_outage_s(self, outage_s: float) -> None:
        self.inner.set_outage_s(outage_s)

    def __repr__(self) -> str:
        return f"PinnedStore({self.inner!r}, {len(self.pins)} pinned)"
