"""Glob expansion over local paths and store URLs: the one expander download, curate and dedup use.

It sits above ``io.open`` (a remote pattern is listed through its store; imported on first use,
so a local-only job never loads the HTTP client), while ``io.paths`` (telling a URL from a path)
stays below everything that writes or opens. Remote listings go through fsspec's ``glob`` (s3fs,
huggingface_hub's ``HfFileSystem``), so a ``prefix/*.zst`` lists one folder, not the whole tree
below it; the matches are then held to the same rules as a local ``glob.glob``.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from feedline.errors import FeedlineError
from feedline.io.errors import IoError
from feedline.io.paths import is_url, local_path
from feedline.io.redact import redact_text

_GLOB_CHARS = "*?["
#: Hub repository types whose paths carry a type prefix (models have none: ``OWNER/NAME``).
_HF_TYPED = ("datasets", "spaces")


@dataclass(frozen=True)
class Match:
    """One matched file. ``size`` comes free with a listing (and a local stat); a URL named
    without glob characters is not looked at here, so its size is ``None``."""

    path: str
    size: int | None = None


def expand_paths(
    patterns: Iterable[str],
    *,
    folder_glob: str = "**/*",
    error: type[Exception] = IoError,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """Every file matching ``patterns``: in pattern order, sorted within a pattern, each once.

    Local patterns are globs (``**`` spans folders); a plain folder stands for
    ``<folder>/<folder_glob>``; a plain path that does not exist is an error. Store URLs
    (``s3://``, ``hf://datasets/OWNER/NAME[@REV]/...``, ``memory://``) are listed below the part
    before the first glob character and matched with the same rules (``*`` stays within a folder,
    ``**/`` spans zero or more, hidden names match only a pattern that starts with ``.``); a
    store URL ending in ``/`` stands for ``<url><folder_glob>``. A URL without glob characters is
    kept as given. HTTP has no listing: an ``http(s)://`` URL is kept as given, and one with glob
    characters in its path (or ending in ``/``) is an error.

    Args:
        patterns: paths, ``file://`` URLs, globs or store URLs (``s3://bucket/docs/**/*.gz``).
        folder_glob: what a plain local folder (or a store URL ending in ``/``) expands to.
        error: the caller's error class, raised for a pattern that matches nothing, naming it.
        include: fnmatch patterns on each listed file's path relative to its pattern's fixed
            part (``*`` spans ``/`` here, as in huggingface_hub's ``allow_patterns``; a pattern
            ending in ``/`` means everything below that folder). With any given, a listed file
            must match one. Paths named without a glob are not filtered: they were asked for.
        exclude: the same form; a listed file matching one is left out (exclude wins).
        storage_options: for the stores that list remote patterns (endpoint, credentials).
    """
    return [m.path for m in expand_matches(
        patterns, folder_glob=folder_glob, error=error, include=include, exclude=exclude,
        storage_options=storage_options,
    )]


def expand_matches(
    patterns: Iterable[str],
    *,
    folder_glob: str = "**/*",
    error: type[Exception] = IoError,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    storage_options: dict[str, Any] | None = None,
) -> list[Match]:
    """:func:`expand_paths` with each file's size when the listing told it (for progress totals)."""
    keep = _Filter(include, exclude)
    found: dict[str, Match] = {}
    for pattern in patterns:
        if is_url(pattern):
            listed, matches = _expand_url(pattern, folder_glob, error, keep, storage_options or {})
        else:
            listed, matches = _expand_local(pattern, folder_glob, error, keep)
        if not matches:
            shown = redact_text(pattern)
            if listed:
                raise error(
                    f"{shown}: matches no files ({listed} listed, all left out by the "
                    "include/exclude patterns)"
                )
            raise error(f"{shown}: matches no files")
        for match in matches:
            key = match.path if is_url(match.path) else os.path.abspath(match.path)
            found.setdefault(key, match)
    return list(found.values())


class _Filter:
    """``--include`` / ``--exclude``: fnmatch on a path relative to its pattern's fixed part."""

    def __init__(self, include: Sequence[str], exclude: Sequence[str]) -> None:
        self.include = [_folder_pattern(p) for p in include]
        self.exclude = [_folder_pattern(p) for p in exclude]

    def __call__(self, relative: str) -> bool:
        if self.include and not any(fnmatch.fnmatchcase(relative, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(relative, p) for p in self.exclude)


def _folder_pattern(pattern: str) -> str:
    return pattern + "*" if pattern.endswith("/") else pattern


def _has_glob(text: str) -> bool:
    return any(c in text for c in _GLOB_CHARS)


def _glob_cut(text: str) -> int:
    return min((i for i, c in enumerate(text) if c in _GLOB_CHARS), default=len(text))


def _expand_local(
    pattern: str, folder_glob: str, error: type[Exception], keep: _Filter
) -> tuple[int, list[Match]]:
    """(files listed before filtering, matches) of one local pattern."""
    path = local_path(pattern)
    if not _has_glob(path):
        if not os.path.isdir(path):
            if not os.path.exists(path):
                raise error(f"{pattern}: no such file")
            return 1, [Match(path, os.path.getsize(path))] if os.path.isfile(path) else []
        fixed = path.rstrip(os.sep) + os.sep
        path = os.path.join(path, folder_glob)
    else:
        fixed = path[: path.rfind(os.sep, 0, _glob_cut(path)) + 1]
    listed = sorted(m for m in glob.glob(path, recursive=True) if os.path.isfile(m))
    kept = [m for m in listed if keep(os.path.relpath(m, fixed or ".").replace(os.sep, "/"))]
    return len(listed), [Match(m, os.path.getsize(m)) for m in kept]


def _expand_url(
    pattern: str,
    folder_glob: str,
    error: type[Exception],
    keep: _Filter,
    storage_options: dict[str, Any],
) -> tuple[int, list[Match]]:
    scheme = pattern.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        path = urlsplit(pattern).path
        if _has_glob(path) or path.endswith("/"):
            raise error(
                f"{redact_text(pattern)}: HTTP has no listing, so globs and folders cannot be "
                "expanded; name each file (or use an s3://, hf:// or local path)"
            )
        return 1, [Match(pattern)]
    cut = _glob_cut(pattern)
    if cut == len(pattern) and not pattern.endswith("/"):
        return 1, [Match(pattern)]
    base = pattern[: pattern.rfind("/", 0, cut) + 1]
    wanted = pattern[len(base) :] or folder_glob
    if scheme == "hf":
        _check_hf_repo(pattern, base, error)
    try:
        listed = _list_remote(base, wanted, storage_options)
    except FeedlineError as exc:
        raise error(f"{redact_text(pattern)}: cannot list ({_one_line(str(exc))})") from None
    except Exception as exc:  # noqa: BLE001 - a library's own error (e.g. huggingface_hub's) made one line
        raise error(f"{redact_text(pattern)}: cannot list ({_library_error(exc)})") from None
    parts = wanted.split("/")
    matching = sorted((rel, size) for rel, size in listed if _matches(parts, rel.split("/")))
    return len(matching), [Match(base + rel, size) for rel, size in matching if keep(rel)]


def _check_hf_repo(pattern: str, base: str, error: type[Exception]) -> None:
    """A Hub listing needs the repository: globs may start only below ``[TYPE/]OWNER/NAME``."""
    segments = base.split("://", 1)[1].rstrip("/").split("/")
    needed = 3 if segments[0] in _HF_TYPED else 2
    if len([s for s in segments if s]) < needed:
        raise error(
            f"{pattern}: an hf:// glob must name the repository before any glob character: "
            "hf://datasets/OWNER/NAME[@REVISION]/PATH (models: hf://OWNER/NAME/PATH)"
        )


def hf_filesystem(**storage_options: Any) -> Any:
    """huggingface_hub's ``HfFileSystem``: the one place hf:// listings get their filesystem,
    so tests can put an fsspec memory filesystem here (the Hub is unreachable from CI)."""
    from huggingface_hub import HfFileSystem

    return HfFileSystem(**storage_options)


def _list_remote(base: str, wanted: str, storage_options: dict[str, Any]) -> list[tuple[str, int | None]]:
    """``(path relative to base, size)`` of what ``base + wanted`` globs to (a superset of the
    matches under local rules: fsspec's glob lets ``*`` match hidden names)."""
    from feedline.io.fsspec_store import FsspecStore
    from feedline.io.open import open_store

    scheme, rest = base.split("://", 1)
    if scheme.lower() == "hf":
        options = dict(storage_options)
        options.pop("max_connections", None)
        store: Any = FsspecStore(hf_filesystem(**options), rest, protocol="hf")
    else:
        store = open_store(base.rstrip("/"), **storage_options)
    try:
        if not isinstance(store, FsspecStore):
            return [(info.path, info.size) for info in store.list()]
        root = store.full_path("")
        fs = store.fs

        def find() -> dict[str, Any]:
            invalidate = getattr(fs, "invalidate_cache", None)
            if invalidate is not None:
                invalidate(root)  # a listing must be fresh: shards appear while a crawl runs
            return fs.glob(f"{root}/{wanted}", detail=True)

        found = store._call(store.url(), find)
    finally:
        store.close()
    prefix = root.lstrip("/") + "/"
    out: list[tuple[str, int | None]] = []
    for name, info in found.items():
        if info.get("type", "file") != "file":
            continue
        full = name.lstrip("/")
        if not full.startswith(prefix):
            raise IoError(f"{base}: the listing returned {name!r}, which is not below it")
        size = info.get("size")
        out.append((full[len(prefix) :], None if size is None else int(size)))
    return out


def _one_line(text: str) -> str:
    return redact_text(" ".join(text.split()))[:300]


def _library_error(exc: Exception) -> str:
    name = type(exc).__name__
    known = {
        "RepositoryNotFoundError": "no such repository, or it is private or gated (set HF_TOKEN)",
        "GatedRepoError": "the repository is gated: accept its terms and set HF_TOKEN",
        "RevisionNotFoundError": "no such revision",
        "OfflineModeIsEnabled": "HF_HUB_OFFLINE is set; unset it to list the Hub",
    }
    if name in known:
        return known[name]
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{name}: {_one_line(first)}" if first else name


def _matches(parts: list[str], names: list[str]) -> bool:
    """``names`` (a path's segments) match glob ``parts`` as glob.glob(recursive=True) would."""
    if not parts:
        return not names
    head = parts[0]
    if head == "**":
        return any(_matches(parts[1:], names[i:]) for i in range(len(names) + 1)
                   if not any(n.startswith(".") for n in names[:i]))
    if not names or (names[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(names[0], head) and _matches(parts[1:], names[1:])
