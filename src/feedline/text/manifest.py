"""The manifest of a tokenize run: the one file a reader needs to find and trust the token files.

``<out>/manifest.json`` holds the tokenizer (name, sha256 of its ``tokenizer.json``, EOS token
and id, vocabulary size, token dtype), the parameters of the run, and per shard its ``.ds`` path
(relative to the folder), its source, documents, tokens and bytes (and ``"loss": true`` when a
``.ds.loss`` of one byte a token is beside it), plus the totals. It is written
last, atomically, and holds no time stamp, so a rerun that finds every shard done writes the same
bytes. Over HTTP, which has no listing, :class:`~feedline.text.dataset.TokenDataset` finds the
files through it; elsewhere it checks the listed sizes against the files it finds.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from feedline.io import atomic_write
from feedline.io.paths import root_escape
from feedline.text.errors import TokenFileError

__all__ = ["MANIFEST_NAME", "Manifest", "ShardRecord", "parse_manifest", "write_manifest"]

MANIFEST_NAME = "manifest.json"
FORMAT = "feedline-tokens"
VERSION = 1


@dataclass(frozen=True)
class ShardRecord:
    """One shard of the manifest: its ``.ds`` path below the folder, its counts, and whether a
    ``.ds.loss`` is beside it."""

    path: str
    source: str
    documents: int
    tokens: int
    loss: bool = False

    def as_dict(self, token_bytes: int) -> dict[str, Any]:
        out = {"path": self.path, "source": self.source, "documents": self.documents,
               "tokens": self.tokens, "bytes": self.tokens * token_bytes}
        if self.loss:  # only then: a run without loss masks writes the bytes it always wrote
            out["loss"] = True
        return out


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest (see the module docstring)."""

    tokenizer: dict[str, Any]
    parameters: dict[str, Any]
    shards: tuple[ShardRecord, ...]

    @property
    def token_bytes(self) -> int:
        return 4 if self.tokenizer.get("dtype") == "uint32" else 2

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.shards)


def manifest_bytes(tokenizer: Mapping[str, Any], parameters: Mapping[str, Any],
                   shards: Sequence[ShardRecord]) -> bytes:
    token_bytes = 4 if tokenizer.get("dtype") == "uint32" else 2
    body = {
        "format": FORMAT, "version": VERSION, "tokenizer": dict(tokenizer),
        "parameters": dict(parameters),
        "documents": sum(s.documents for s in shards), "tokens": sum(s.tokens for s in shards),
        "shards": [s.as_dict(token_bytes) for s in shards],
    }
    return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_manifest(path: str, tokenizer: Mapping[str, Any], parameters: Mapping[str, Any],
                   shards: Sequence[ShardRecord]) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(manifest_bytes(tokenizer, parameters, shards))


def parse_manifest(data: bytes, where: str) -> Manifest:
    """Read manifest bytes; a damaged or foreign file is a one-line error naming ``where``."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TokenFileError(f"{where}: not a JSON manifest ({exc})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise TokenFileError(f"{where}: not a feedline tokenize manifest (no \"format\": \"{FORMAT}\")")
    if body.get("version") != VERSION:
        raise TokenFileError(f"{where}: manifest version {body.get('version')!r}; this feedline reads {VERSION}")
    try:
        shards = tuple(ShardRecord(str(s["path"]), str(s["source"]), int(s["documents"]), int(s["tokens"]),
                                   s.get("loss") is True)
                       for s in body["shards"])
        manifest = Manifest(dict(body["tokenizer"]), dict(body["parameters"]), shards)
    except (KeyError, TypeError, ValueError) as exc:
        raise TokenFileError(f"{where}: damaged manifest ({type(exc).__name__}: {exc})") from None
    seen: set[str] = set()
    for shard in shards:
        escape = root_escape(shard.path)  # percent-decoded too: a server decodes before it resolves
        if escape is not None or "://" in shard.path:
            raise TokenFileError(f"{where}: shard path {shard.path!r} {escape or 'is a URL'}; "
                                 "shard paths are relative to the manifest's folder")
        clean = posixpath.normpath(shard.path)
        if clean in seen:
            raise TokenFileError(f"{where}: shard {shard.path!r} is listed twice (its windows would be "
                                 "read twice an epoch)")
        seen.add(clean)
    return manifest
