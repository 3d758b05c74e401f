"""Atomic file installs: the one way feedline replaces a file.

A reader must only ever see the previous complete file or the complete new one, whatever happens
to the writer (exception, ``kill -9``, full disk): write a temp file beside the target (same
filesystem, so the rename is atomic), fsync it, ``os.replace`` it over the target, fsync the
folder (so the rename itself survives a power loss). A failed writer removes its temp; a killed
one leaves ``.<name>.<random>.tmp``, which :func:`remove_stale_temps` clears.

Permissions: the temp is created with mode ``0o666`` and the kernel applies the umask, exactly as
for a plain ``open()``. Nothing reads the umask: reading it means setting it (``os.umask``), which
is process-global, so a thread creating a file at that moment would get the wrong mode.

A URL target is staged in a local temp file and handed on commit to the ``upload`` its caller
gives (one PUT: object stores install a whole object or nothing). This module knows no stores:
it sits below them (``LocalStore`` writes through it), so the upload comes from above —
:mod:`feedline.io.upload`, whose :func:`~feedline.io.upload.atomic_write` is the one
``feedline.io`` exports.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from feedline.io.paths import is_url, local_path
from feedline.io.redact import redact_text

#: What follows ``.<name>`` in a temp's name: one dot-free word (ours are 8 hex digits; older
#: versions used mkstemp's), so temps of ``a.jsonl.gz`` never match those of ``a.jsonl``.
_TEMP_TAG = re.compile(r"\.\w+\.tmp", re.ASCII)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install(src: str | os.PathLike[str], target: str | os.PathLike[str], *, durable: bool = True) -> None:
    """Rename the complete file ``src`` over ``target`` (same folder); ``durable`` fsyncs the folder."""
    os.replace(src, target)
    if durable:
        fsync_dir(Path(target).parent)


def temp_path(target: Path) -> Path:
    """A fresh temp name beside ``target`` (``.<name>.<8 hex>.tmp``, hidden from globs)."""
    return target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")


def remove_stale_temps(target: str | os.PathLike[str]) -> int:
    """Delete temps that killed writers of ``target`` left beside it; returns how many.

    Only for a target no other process is writing right now (the caller holds its lock or owns
    the file); never touches ``target`` itself nor temps of other targets.
    """
    if is_url(target):
        return 0
    path = Path(local_path(target))
    prefix = f".{path.name}"
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path.parent):
            name = entry.name
            if name.startswith(prefix) and _TEMP_TAG.fullmatch(name, len(prefix)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


class AtomicFile:
    """A file that appears at ``target`` only on :meth:`commit`; :meth:`abort` keeps the old one.

    Write through :attr:`handle`. Every writer in feedline (manifests, checkpoints, markers,
    attribute files, mix shards, sidecars) builds on this class or on :func:`atomic_write`.

    Args:
        target: a local path (``file://`` allowed), or a URL, staged in a local temp file and
            given to ``upload`` on commit.
        mode: a write mode for :attr:`handle` (``"wb"`` default, ``"w"`` for text).
        durable: fsync the data before the rename and the folder after it (default). ``False``
            keeps the install atomic for every other process but lets an OS crash lose it; for
            files whose readers re-verify them anyway (download checkpoints), where each fsync
            would also flush unrelated pending writes on ext4/XFS.
        upload: for a URL target, puts the complete staged file at ``target`` (required then;
            :func:`feedline.io.upload.atomic_file` supplies it).
        **open_kwargs: ``encoding``, ``newline``, ``buffering`` ... as for ``open()``.
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        mode: str = "wb",
        *,
        durable: bool = True,
        upload: Callable[[Path], None] | None = None,
        **open_kwargs: Any,
    ) -> None:
        if "w" not in mode or any(c in mode for c in "ra+x"):
            raise ValueError(f"AtomicFile needs a write mode ('w' or 'wb'), got {mode!r}")
        self.target = os.fspath(target)
        self.durable = durable
        self.remote = is_url(self.target)
        if self.remote and upload is None:
            raise ValueError(
                f"AtomicFile: {redact_text(self.target)} is a URL and no upload was given; "
                "write it with feedline.io.atomic_write or atomic_file"
            )
        self._upload = upload
        if self.remote:
            fd, name = tempfile.mkstemp(prefix="feedline-", suffix=".upload")
            self._tmp = Path(name)
        else:
            final = Path(local_path(self.target))
            final.parent.mkdir(parents=True, exist_ok=True)
            self._final = final
            while True:
                self._tmp = temp_path(final)
                try:
                    fd = os.open(self._tmp, _CREATE, 0o666)  # the kernel applies the umask
                    break
                except FileExistsError:
                    continue
        try:
            self.handle: IO[Any] = os.fdopen(fd, mode, **open_kwargs)
        except BaseException:
            os.close(fd)
            self._tmp.unlink()
            raise
        self.done = False
        self.prepared = False

    def prepare(self) -> None:
        """Finish the temp (flush, fsync, close) without installing it, so several files can be
        written one after another, holding no open handle each, and installed together once
        all of them are complete (:meth:`commit`); on failure the temp is gone."""
        if self.prepared or self.done:
            return
        try:
            self._finish()
        except BaseException:
            self.done = True
            self._discard()
            raise
        self.prepared = True

    def _finish(self) -> None:
        self.handle.flush()
        if self.durable and not self.remote:
            os.fsync(self.handle.fileno())
        self.handle.close()

    def commit(self) -> None:
        """Finish the file and put it in place; on failure the temp is gone and the old file stays."""
        if self.done:
            return
        self.done = True
        try:
            if not self.prepared:
                self._finish()
            if self._upload is not None:
                self._upload(self._tmp)
                self._tmp.unlink()
            else:
                install(self._tmp, self._final, durable=self.durable)
        except BaseException:
            self._discard()
            raise

    def abort(self) -> None:
        """Drop what was written; the file at ``target`` (if any) is untouched."""
        self.done = True
        self._discard()

    def _discard(self) -> None:
        with contextlib.suppress(Exception):
            self.handle.close()
        with contextlib.suppress(OSError):
            self._tmp.unlink()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", *, durable: bool = True, **open_kwargs: Any
) -> Iterator[IO[Any]]:
    """Write ``path`` all-or-nothing: a handle whose file replaces ``path`` when the block ends
    without an exception; on any exception the old file stays and the temp is removed.

    Args:
        path: the target, a local path (:func:`feedline.io.upload.atomic_write` takes URLs too).
        mode: ``"wb"`` (default) or ``"w"``.
        durable: see :class:`AtomicFile`.
        **open_kwargs: as for ``open()`` (``encoding`` ...).
    """
    with AtomicFile(path, mode, durable=durable, **open_kwargs) as output:
        yield output.handle
