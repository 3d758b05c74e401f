"""The sources of a mixture: what a user writes to mix datasets in one stream.

Why a type of its own: a mixture is given in Python (``sources=[Source(...), {...}]``) and in a
YAML file (``feedline train --dataset.mixture=FILE``); both become the same :class:`Source`
values, checked once, with errors that name the source. The counting lives in
:mod:`feedline.streaming.schedule.mixture`; this module is the user's side of it.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from feedline.episodes.errors import MixtureError
from feedline.io.redact import redact_text, redacted_repr
from feedline.streaming.schedule.mixture import Quota
from feedline.validate import plain, shown

__all__ = ["BATCHING", "Mixture", "Source", "as_source", "load_mixture"]

#: ``batching=`` values: ``random`` mixes sources as the pool draws them; ``stratified`` gives
#: every batch each source's share.
BATCHING = ("random", "stratified")


@dataclass(frozen=True)
class Source:
    """One dataset of a mixture and how much of it an epoch holds.

    Args:
        root: the dataset's root (a folder, ``http(s)://``, ``s3://``, ``hf://``...). Give it
            or ``repo_id``.
        repo_id: ``OWNER/NAME`` of a Hub dataset.
        weight: a share of ``epoch_size`` (relative to the other sources' weights, after the
            ``repeat`` and ``choose`` sources took theirs).
        repeat: a multiple of the source's selected frames per epoch (fractional allowed).
        choose: frames per epoch.
        episodes: the episodes to use. Default ``None``: all.
        feature_map: renames the source's keys to the mixture's (``{"observation.images.wrist":
            "observation.images.hand"}``), so that one camera or state lines up across sources.
        revision: the Hub revision, with ``repo_id``. Default ``None``.
        storage_options: options of the source's store (credentials, endpoint). Default none.

    With none of ``weight``, ``repeat`` and ``choose``, every frame comes once per epoch.
    """

    root: str | None = None
    repo_id: str | None = None
    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None
    episodes: tuple[int, ...] | None = None
    feature_map: Mapping[str, str] = field(default_factory=dict)
    revision: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in ("weight", "repeat", "choose"):  # numpy numbers: checked and quoted as Python's
            object.__setattr__(self, key, plain(getattr(self, key)))
        if (self.root is None) == (self.repo_id is None):
            raise MixtureError(f"a source needs exactly one of root or repo_id: {self.name}")
        for key in ("root", "repo_id", "revision"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str | os.PathLike):
                raise MixtureError(f"{self.name}: {key} must be text, not {value!r}")
        if self.root is not None and not isinstance(self.root, str):
            object.__setattr__(self, "root", os.fspath(self.root))
        for key in ("feature_map", "storage_options"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, Mapping):
                raise MixtureError(f"{self.name}: {key} must be a mapping, not {value!r}")
        if self.storage_options is None:
            object.__setattr__(self, "storage_options", {})
        if self.episodes is not None:
            episodes = self.episodes
            if isinstance(episodes, str | bytes | Mapping) or not isinstance(episodes, Iterable) or not all(
                    isinstance(e, numbers.Integral) and not isinstance(e, bool) and e >= 0 for e in episodes):
                raise MixtureError(f"{self.name}: episodes must be a list of episode indices (whole "
                                   f"numbers >= 0), not {shown(episodes)}")
            object.__setattr__(self, "episodes", tuple(int(e) for e in episodes))
        mapping = dict(self.feature_map or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
            raise MixtureError(f"{self.name}: feature_map maps key names to key names")
        targets = list(mapping.values())
        if len(set(targets)) != len(targets):
            raise MixtureError(f"{self.name}: feature_map gives two keys the same name")
        object.__setattr__(self, "feature_map", mapping)
        try:
            Quota(weight=self.weight, repeat=self.repeat, choose=self.choose)  # checked now
        except MixtureError as exc:
            raise MixtureError(f"{self.name}: {exc}") from None

    @property
    def name(self) -> str:
        """How messages and the checkpoint's description name the source: its root (without
        user:password or query tokens) or repo id."""
        return redact_text(str(self.root if self.root is not None else self.repo_id))

    def __repr__(self) -> str:  # roots and store options may hold credentials
        return redacted_repr(self)

    @property
    def quota(self) -> Quota:
        return Quota(weight=self.weight, repeat=self.repeat, choose=self.choose)

    def reader_options(self) -> dict[str, Any]:
        """The keyword arguments that open this source as a dataset root."""
        return {
            "repo_id": self.repo_id, "root": self.root, "revision": self.revision,
            "episodes": self.episodes, "storage_options": dict(self.storage_options),
        }


_KEYS = frozenset(f.name for f in fields(Source))


def as_source(value: Source | Mapping[str, Any] | str | os.PathLike[str], index: int = 0) -> Source:
    """``value`` as a :class:`Source`: a Source, a dict of its keys, or a bare root."""
    if isinstance(value, Source):
        return value
    if isinstance(value, str | os.PathLike):
        return Source(root=os.fspath(value))
    if not isinstance(value, Mapping):
        raise MixtureError(f"source {index} must be a Source, a dict or a root, not {value!r}")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise MixtureError(
            f"source {index} has unknown key(s) {unknown}; a source takes {sorted(_KEYS)}"
        )
    return Source(**dict(value))


@dataclass(frozen=True)
class Mixture:
    """A list of sources with the mixture-wide settings.

    Args:
        sources: the sources, in ``dataset_index`` order.
        epoch_size: anchors per epoch over all sources. Default ``None``: the sum of the
            sources' frames when some source has a weight, else the sum of their counts.
        batching: one of :data:`BATCHING`. Default ``"random"``.
    """

    sources: tuple[Source, ...]
    epoch_size: int | None = None
    batching: str = "random"

    def __post_init__(self) -> None:
        if not self.sources:
            raise MixtureError("a mixture needs at least one source")
        if self.batching not in BATCHING:
            raise MixtureError(f"batching must be one of {list(BATCHING)}, not {self.batching!r}")
        size = self.epoch_size
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int | float) or not math.isfinite(size)
            or int(size) != size or size < 1
        ):
            raise MixtureError(f"epoch_size must be a whole number >= 1, not {shown(self.epoch_size)}")

    @classmethod
    def of(
        cls, sources: Iterable[Source | Mapping[str, Any] | str], *, epoch_size: int | None = None,
        batching: str = "random",
    ) -> Mixture:
        return cls(tuple(as_source(s, i) for i, s in enumerate(sources)), epoch_size, batching)

    def describe(self, counts: Sequence[int]) -> str:
        """One line naming every source, its quota and its anchors per epoch (the checkpoint
        records it, so a changed weight is refused by name)."""
        parts = [
            f"{i}:{s.name} {s.quota.describe()} = {n}"
            + (f" episodes {list(s.episodes)}" if s.episodes is not None else "")
            + (f" map {dict(sorted(s.feature_map.items()))}" if s.feature_map else "")
            for i, (s, n) in enumerate(zip(self.sources, counts, strict=True))
        ]
        return f"{self.batching}: " + "; ".join(parts)


def load_mixture(path: str | os.PathLike[str]) -> Mixture:
    """A mixture file: YAML (or JSON) holding ``sources`` (a list of source dicts) and optional
    ``epoch_size`` and ``batching``; a bare list is the sources alone."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise MixtureError(f"{path}: cannot read the mixture file ({exc.strerror})") from None
    try:
        import yaml

        data = yaml.safe_load(text)
    except ImportError:  # JSON is YAML's subset: read it without PyYAML
        import json

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise MixtureError(f"{path}: not JSON, and PyYAML is not installed ({exc})") from None
    except Exception as exc:  # yaml.YAMLError: the parser's own line and column
        raise MixtureError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if isinstance(data, list):
        data = {"sources": data}
    if not isinstance(data, Mapping) or "sources" not in data:
        raise MixtureError(f"{path}: a mixture file holds `sources:` (a list of sources)")
    extra = sorted(set(data) - {"sources", "epoch_size", "batching"})
    if extra:
        raise MixtureError(f"{path}: unknown key(s) {extra}; use sources, epoch_size, batching")
    if not isinstance(data["sources"], list):
        raise MixtureError(f"{path}: `sources:` must be a list of sources (each `- root: ...`), "
                           f"not {type(data['sources']).__name__} {data['sources']!r}"[:300])
    try:
        return Mixture.of(
            data["sources"], epoch_size=data.get("epoch_size"),
            batching=data.get("batching", "random"),
        )
    except MixtureError as exc:
        raise MixtureError(f"{path}: {exc}") from None
