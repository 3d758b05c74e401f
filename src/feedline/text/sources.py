"""Sources of a token mixture: one corpus each, with a ``weight``, ``repeat`` or ``choose``.

The counts are the episode reader's mixture semantics
(:func:`~feedline.streaming.schedule.mixture.source_counts`), counted in windows: ``choose`` is a
number of windows per epoch, ``repeat`` a multiple of the source's windows, and ``weight``
sources share what the others leave of ``epoch_size`` in proportion. Which windows fill a count
is :class:`~feedline.streaming.schedule.mixture.MixtureUnits`'s rule: whole passes, then a window
of the source's seeded cycle of chunks that walks on from epoch to epoch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from feedline.io.redact import redacted_repr
from feedline.streaming.errors import MixtureError
from feedline.streaming.schedule.mixture import Quota
from feedline.text.errors import TextError
from feedline.validate import plain

__all__ = ["TokenSource", "as_sources"]


@dataclass(frozen=True)
class TokenSource:
    """One corpus of a mixture.

    Args:
        root: the corpus (a ``feedline tokenize`` output folder, local, ``http(s)://`` or ``s3://``).
        weight: a share of what ``epoch_size`` leaves after the ``repeat``/``choose`` sources.
        repeat: a multiple of the source's windows per epoch (fractional allowed).
        choose: windows per epoch.
        storage_options: for this source's store. Default none.
        name: how messages and metrics name it. Default: the root's last folder name.
    """

    root: str
    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    def __post_init__(self) -> None:
        for key in ("weight", "repeat", "choose"):  # numpy numbers: checked and quoted as Python's
            object.__setattr__(self, key, plain(getattr(self, key)))

    def __repr__(self) -> str:  # roots and store options may hold credentials
        return redacted_repr(self)

    @property
    def quota(self) -> Quota:
        try:
            return Quota(weight=self.weight, repeat=self.repeat, choose=self.choose)
        except MixtureError as exc:  # the floor's error, naming the source
            raise MixtureError(f"source {self.label}: {exc}") from None

    @property
    def label(self) -> str:
        return self.name or os.path.basename(os.fspath(self.root).rstrip("/")) or os.fspath(self.root)


def as_sources(root_or_sources: Any, storage_options: Mapping[str, Any] | None) -> list[TokenSource]:
    """A root (path or URL), one :class:`TokenSource`, a list of them, or dicts of their fields."""
    if isinstance(root_or_sources, str | os.PathLike):
        return [TokenSource(os.fspath(root_or_sources), storage_options=dict(storage_options or {}))]
    items: Sequence[Any] = [root_or_sources] if isinstance(root_or_sources, TokenSource | Mapping) else root_or_sources
    out = []
    for item in items:
        if isinstance(item, Mapping):
            try:
                item = TokenSource(**item)
            except TypeError as exc:
                raise TextError(f"a token source takes root, weight, repeat, choose, storage_options, name: {exc}") from None
        if not isinstance(item, TokenSource):
            raise TextError(f"not a token source: {item!r} (give a root path or URL, or TokenSource(...))")
        if storage_options and not item.storage_options:
            item = TokenSource(item.root, item.weight, item.repeat, item.choose, dict(storage_options), item.name)
        out.append(item)
    if not out:
        raise TextError("no token sources given")
    return out
