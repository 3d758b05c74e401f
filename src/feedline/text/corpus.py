"""A tokenize output folder read from any store: its files, token counts and document ends.

Nothing is downloaded first. A corpus reads the manifest when there is one (over HTTP, which has
no listing, it must be there: the files are found through it), else lists the ``*.ds`` files of
the folder (a folder written by datatrove itself reads too). Then it reads every ``.ds.index``
whole (8 bytes a document) and checks it against the token file's size and the manifest's
document count; the tokens stay in the store and are fetched later by byte range, a chunk at a
time.

A ``.ds.loss`` (one byte per token: datatrove's ``DocumentTokenizer`` loss mask, or ``feedline
tokenize --loss-mask``'s) is found only when the reader asks for loss masks (``with_loss``):
through the manifest's ``loss`` entries, else by a stat beside every ``.ds`` (all of a folder's
files have one, or none). Its size must be the file's token count.

Every ``.ds``, ``.ds.index`` and ``.ds.loss`` is pinned to the object first stat'ed (size and fingerprint), as
the episode reader pins its videos: a token read of a replaced ``.ds`` is a
:class:`~feedline.text.errors.TokenFileChangedError` naming it, never other tokens, and each
process checks a file's index pin before its first read of that file. With a manifest, every
window read is checked for ids at or past the tokenizer's vocabulary size.

A corpus pickles to a root URL, options and the small arrays; each process opens its own store on
first use (connections are never shared between DataLoader workers).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from feedline.io.errors import NotFoundError, ObjectChangedError, StoreError
from feedline.io.redact import redact_text
from feedline.text.boundaries import distinct_ends
from feedline.text.errors import TokenFileChangedError, TokenFileError
from feedline.text.layout import INDEX_SUFFIX, LOSS_SUFFIX, METADATA_SUFFIX, TOKENS_SUFFIX
from feedline.text.manifest import MANIFEST_NAME, Manifest, parse_manifest

__all__ = ["TokenCorpus"]


def _token_bytes_from_metadata(data: bytes, where: str) -> int:
    first = data.decode("utf-8", "replace").splitlines()[0] if data else ""
    size = first.rsplit("|", 1)[-1]
    if size not in ("2", "4"):
        raise TokenFileError(f"{where}: no token size in its first line ({first[:80]!r}); give token_size=")
    return int(size)


@dataclass
class TokenCorpus:
    """The token files below ``root`` (a folder, ``http(s)://`` or ``s3://`` URL).

    Args:
        root: the ``--out`` folder of ``feedline tokenize`` (or a datatrove output folder).
        storage_options: for the store (``endpoint_url``, credentials ...). Default none.
        token_size: bytes per token when neither a manifest nor a ``.ds.metadata`` says.
        outage_s: how long the store may fail transiently while reads are retried. Default
            ``None``: the store's own default.
        with_loss: find each file's ``.ds.loss`` (see the module docstring). Default ``False``.
    """

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    token_size: int | None = None
    outage_s: float | None = None
    with_loss: bool = False

    def __post_init__(self) -> None:
        self.root = os.fspath(self.root)
        self._store: Any = None
        self._pid = -1
        self.manifest: Manifest | None = None
        self.pins: dict[str, Any] = {}  # path -> ObjectInfo first seen (every .ds and .ds.index)
        self._index_checked: set[int] = set()  # files whose index pin this process checked
        self.names, tokens, self.token_bytes = self._find_files()
        self.tokens = np.asarray(tokens, dtype=np.int64)
        documents = [s.documents for s in self.manifest.shards] if self.manifest is not None else None
        self.doc_ends = [self._read_index(name, int(n), None if documents is None else documents[i])
                         for i, (name, n) in enumerate(zip(self.names, self.tokens, strict=True))]
        #: The document ends that bound windows' documents (an empty document's repeat dropped).
        self.boundary_ends = [distinct_ends(ends) for ends in self.doc_ends]
        self.dtype = np.dtype("<u2" if self.token_bytes == 2 else "<u4")
        #: Each file's ``.ds.loss`` name, ``None`` for a file without one (or without ``with_loss``).
        self.loss_names: list[str | None] = self._find_loss() if self.with_loss else [None] * len(self.names)
        vocab = self.manifest.tokenizer.get("vocab_size") if self.manifest is not None else None
        self.vocab_size = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None

    # ---- the store, one per process -------------------------------------------------------
    @property
    def store(self) -> Any:
        if self._store is None or self._pid != os.getpid():
            from feedline.io import open_store

            try:
                self._store = open_store(self.root, **self.storage_options)
            except StoreError as exc:
                raise TokenFileError(f"{redact_text(self.root)}: {exc}") from None
            if self.outage_s is not None:
                self._store.set_outage_s(self.outage_s)
            self._pid = os.getpid()
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"], state["_pid"], state["_index_checked"] = None, -1, set()
        return state

    def where(self, name: str = "") -> str:
        return redact_text(posixpath.join(self.root.rstrip("/"), name) if name else self.root)

    # ---- finding the files ------------------------------------------------------------------
    def _read(self, name: str) -> bytes | None:
        try:
            return self.store.read_bytes(name)
        except NotFoundError:
            return None
        except StoreError as exc:
            raise TokenFileError(f"{self.where(name)}: {exc}") from None

    def _find_files(self) -> tuple[list[str], list[int], int]:
        data = self._read(MANIFEST_NAME)
        if data is not None:
            manifest = self.manifest = parse_manifest(data, self.where(MANIFEST_NAME))
            names = [s.path for s in manifest.shards]
            token_bytes = manifest.token_bytes
            for shard in manifest.shards:
                size = self._size(shard.path)
                if size != shard.tokens * token_bytes:
                    raise TokenFileError(
                        f"{self.where(shard.path)}: {size} bytes, but the manifest lists {shard.tokens} tokens "
                        f"of {token_bytes} bytes ({shard.tokens * token_bytes}); the folder changed since tokenize"
                    )
            return names, [s.tokens for s in manifest.shards], token_bytes
        if self.root.startswith(("http://", "https://")):
            raise TokenFileError(f"{self.where(MANIFEST_NAME)}: not found; over HTTP the token files are "
                                 "found through the manifest feedline tokenize writes")
        try:
            listed = [i for i in self.store.list("") if i.path.endswith(TOKENS_SUFFIX)
                      and not any(p.startswith(".") for p in i.path.split("/"))]
        except StoreError as exc:
            raise TokenFileError(f"{self.where()}: cannot list ({exc})") from None
        if not listed:
            raise TokenFileError(f"{self.where()}: no {TOKENS_SUFFIX} token files and no {MANIFEST_NAME}")
        names = [i.path for i in listed]
        for name in names:
            self._size(name)  # pinned: a listing's entries may lack the fingerprint a stat gives
        token_bytes = self.token_size
        if token_bytes is None:
            meta = self._read(names[0][: -len(TOKENS_SUFFIX)] + METADATA_SUFFIX)
            if meta is None:
                raise TokenFileError(f"{self.where(names[0])}: no manifest and no .ds.metadata to tell "
                                     "the token size; give token_size=2 or 4")
            token_bytes = _token_bytes_from_metadata(meta, self.where(names[0]))
        tokens = []
        for info in listed:
            if self.pins[info.path].size % token_bytes:
                raise TokenFileError(f"{self.where(info.path)}: {self.pins[info.path].size} bytes is not a whole number of "
                                     f"{token_bytes}-byte tokens (truncated?)")
            tokens.append(self.pins[info.path].size // token_bytes)
        return names, tokens, int(token_bytes)

    def _size(self, name: str) -> int:
        try:
            pin = self.pins[name] = self.store.stat(name)
            return int(pin.size)
        except NotFoundError:
            raise TokenFileError(f"{self.where(name)}: listed in the manifest but missing") from None
        except StoreError as exc:
            raise TokenFileError(f"{self.where(name)}: {exc}") from None

    def _read_index(self, name: str, tokens: int, documents: int | None) -> np.ndarray:
        index = name[: -len(TOKENS_SUFFIX)] + INDEX_SUFFIX
        try:
            pin = self.pins[index] = self.store.stat(index)
            data = self.store.read_ranges_pinned(index, [(0, pin.size)], pin)[0] if pin.size else b""
        except NotFoundError:
            raise TokenFileError(f"{self.where(index)}: missing (every .ds needs its .ds.index)") from None
        except StoreError as exc:
            raise TokenFileError(f"{self.where(index)}: {exc}") from None
        if len(data) % 8:
            raise TokenFileError(f"{self.where(index)}: {len(data)} bytes is not a whole number of uint64 ends")
        ends = np.frombuffer(data, dtype="<u8").astype(np.int64)
        if tokens and not ends.size:
            raise TokenFileError(f"{self.where(index)}: empty, but {name} holds {tokens} tokens")
        if documents is not None and ends.size != documents:
            raise TokenFileError(f"{self.where(index)}: {ends.size} document ends, but the manifest lists "
                                 f"{documents} documents for {name}; the folder changed since tokenize")
        if ends.size and (np.any(np.diff(ends) < 0) or ends[0] < 0 or ends[-1] != tokens):
            raise TokenFileError(f"{self.where(index)}: document ends do not fit {name} ({tokens} tokens; "
                                 f"last end {int(ends[-1])})")
        return ends

    def _find_loss(self) -> list[str | None]:
        stems = [name[: -len(TOKENS_SUFFIX)] for name in self.names]
        if self.manifest is not None:
            listed = [s.loss for s in self.manifest.shards]
        else:
            listed = []
            for stem in stems:
                try:
                    self.store.stat(stem + LOSS_SUFFIX)
                    listed.append(True)
                except NotFoundError:
                    listed.append(False)
                except StoreError as exc:
                    raise TokenFileError(f"{self.where(stem + LOSS_SUFFIX)}: {exc}") from None
            if any(listed) and not all(listed):
                have = stems[listed.index(True)] + LOSS_SUFFIX
                lack = stems[listed.index(False)] + LOSS_SUFFIX
                raise TokenFileError(f"{self.where(lack)}: missing, but {have} is there; every .ds of a folder "
                                     "needs its .ds.loss, or none")
        out: list[str | None] = []
        for stem, n, has in zip(stems, self.tokens.tolist(), listed, strict=True):
            if not has:
                out.append(None)
                continue
            name = stem + LOSS_SUFFIX
            try:
                pin = self.pins[name] = self.store.stat(name)
            except NotFoundError:
                raise TokenFileError(f"{self.where(name)}: listed in the manifest but missing") from None
            except StoreError as exc:
                raise TokenFileError(f"{self.where(name)}: {exc}") from None
            if int(pin.size) != n:
                raise TokenFileError(f"{self.where(name)}: {pin.size} bytes, but {stem + TOKENS_SUFFIX} holds {n} "
                                     "tokens (one loss byte a token); the folder changed since it was written")
            out.append(name)
        return out

    # ---- reading ----------------------------------------------------------------------------
    def read_tokens(self, file: int, start: int, end: int) -> np.ndarray:
        """Tokens ``[start, end)`` of file ``file``: one ranged read, pinned to the file opened."""
        return self.read_token_ranges(file, [(start, end)])

    def read_token_ranges(self, file: int, ranges: list[tuple[int, int]]) -> np.ndarray:
        """The tokens of ``ranges`` (``[start, end)`` each) of file ``file``, back to back: one
        pinned read (a packed chunk's documents are a few ranges)."""
        tb = self.token_bytes
        name = self.names[file]
        try:
            if file not in self._index_checked:  # the index this process's windows rely on
                index = name[: -len(TOKENS_SUFFIX)] + INDEX_SUFFIX
                self.store.check_pin(index, self.pins[index])
                self._index_checked.add(file)
        except ObjectChangedError as exc:
            raise self._changed(exc) from None
        except StoreError as exc:
            raise TokenFileError(f"{self.where(name)}: {exc}") from None
        data = self._read_pinned(name, [(a * tb, b * tb) for a, b in ranges])
        tokens = np.frombuffer(data, dtype=self.dtype)
        if self.vocab_size is not None and tokens.size and int(tokens.max()) >= self.vocab_size:
            at = int(np.flatnonzero(tokens >= self.vocab_size)[0])
            lengths = np.array([b - a for a, b in ranges])
            k = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
            where = ranges[k][0] + at - int(lengths[:k].sum())  # the token's place in the file
            raise TokenFileError(
                f"{self.where(name)}: token id {int(tokens[at])} at token {where} (byte {where * tb}) "
                f"is not below the manifest's vocabulary size {self.vocab_size}; the file is damaged")
        return tokens

    @property
    def held_bytes(self) -> int:
        """Bytes a fetched token takes: its width, plus its loss byte when the files have one."""
        return self.token_bytes + (1 if any(n is not None for n in self.loss_names) else 0)

    def read_loss(self, file: int, start: int, end: int) -> np.ndarray | None:
        """Loss bytes ``[start, end)`` of file ``file`` as bools (one ranged read, pinned), or
        ``None`` when the file has no ``.ds.loss``."""
        return self.read_loss_ranges(file, [(start, end)])

    def read_loss_ranges(self, file: int, ranges: list[tuple[int, int]]) -> np.ndarray | None:
        """The loss bytes of ``ranges`` of file ``file``, back to back, as bools; ``None``
        when the file has no ``.ds.loss``."""
        name = self.loss_names[file]
        if name is None:
            return None
        return np.frombuffer(self._read_pinned(name, list(ranges)), dtype=np.uint8) != 0

    @staticmethod
    def _changed(exc: ObjectChangedError) -> TokenFileChangedError:
        return TokenFileChangedError(
            f"{redact_text(exc.url)}: changed since the dataset was opened ({exc.what}); "
            "reopen the dataset to read the new files")

    def _read_pinned(self, name: str, byte_ranges: list[tuple[int, int]]) -> bytes:
        """The bytes of ``byte_ranges`` of ``name``, back to back, read against its pin: a
        changed file or a short read is a one-line error naming it."""
        try:
            parts = self.store.read_ranges_pinned(name, byte_ranges, self.pins[name])
        except ObjectChangedError as exc:
            raise self._changed(exc) from None
        except StoreError as exc:
            raise TokenFileError(f"{self.where(name)}: {exc}") from None
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        want = sum(b - a for a, b in byte_ranges)
        if len(data) != want:
            raise TokenFileError(f"{self.where(name)}: short read ({len(data)} of {want} bytes)")
        return data

    def identity(self) -> str:
        """Digest of the files' names, token counts and document counts."""
        h = hashlib.sha256(b"feedline.text.corpus/v1")
        for name, n, ends in zip(self.names, self.tokens.tolist(), self.doc_ends, strict=True):
            h.update(f"{name}\0{n}\0{ends.size}\0".encode())
        return h.hexdigest()[:32]
