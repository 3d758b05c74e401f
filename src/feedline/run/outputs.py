"""Where a run's outputs may go, checked before any work, and installed together at the end.

Why here: ``feedline dedup`` (both executors) and ``feedline download --dedup`` read files they
did not write and write files beside them. Two rules keep a command from destroying data it did
not write, and both commands need them, so they live once: every output is inside its output
folder (after symlinks: no name climbs out with ``..``), and no output, verdict file, summary,
manifest or work dir is one of the inputs (after :func:`os.path.realpath`, so ``./a``,
``../x/a`` and a symlink to ``a`` are the same file). Both are checked before the first byte is
read, so a refused run leaves nothing behind.

:class:`InstallSet` is the all-or-nothing part: a run's files are written to the atomic-install
temps of :mod:`feedline.io.atomic` and renamed to their names only when every one is complete,
so a run that fails half-way leaves nothing under its final names.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from feedline.io.atomic import AtomicFile
from feedline.io.paths import is_url, local_path


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(local_path(os.fspath(path)))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def output_path(root: str | os.PathLike[str], name: str, *, error: type[Exception], flag: str = "--out") -> Path:
    """``root/name``, refused (one line naming both) when ``name`` is absolute, has a ``..``
    part, or resolves outside ``root`` (a symlinked ``root`` is fine; a symlink inside it
    pointing elsewhere is not)."""
    parts = name.split("/")
    if not name or posixpath.isabs(name) or ".." in parts:
        raise error(f"{name}: output name is not a path below {flag} {root}; name the inputs without '..'")
    path = Path(root) / name
    if not _inside(_real(path), _real(root)):
        raise error(f"{path}: resolves to {_real(path)}, outside {flag} {root}; remove the symlink or choose another {flag}")
    return path


def refuse_inputs(
    outputs: Iterable[tuple[str | os.PathLike[str], str]],
    inputs: Iterable[str | os.PathLike[str]],
    *,
    error: type[Exception],
    folders: Iterable[tuple[str | os.PathLike[str], str]] = (),
) -> None:
    """One-line ``error`` if an output file is an input, or an input lies in an output folder.

    ``outputs`` and ``folders`` are ``(path, what to do instead)`` pairs (``"choose another
    --out"``); ``folders`` are folders the run owns and may write anything in (a work dir),
    so an input inside one is refused too. URL inputs are skipped: they cannot be local outputs.
    """
    real: dict[str, str] = {}
    for source in inputs:
        if not is_url(source):
            real.setdefault(_real(source), os.fspath(source))
    if not real:
        return
    for path, advice in outputs:
        source = real.get(_real(path))
        if source is not None:
            raise error(f"output {path} would replace the input {source}; {advice}")
    for folder, advice in folders:
        root = _real(folder)
        for resolved, source in real.items():
            if _inside(resolved, root):
                raise error(f"the input {source} is inside {folder}, which this run writes to; {advice}")


class InstallSet:
    """Files that appear together or not at all.

    :meth:`add` opens an :class:`~feedline.io.atomic.AtomicFile`; a caller writes it and calls
    its ``prepare()`` (the temp complete, its handle closed). :meth:`commit` installs every file;
    :meth:`abort`, or leaving a ``with`` block on an exception, removes every temp, so the
    previous files (or none) stay under the final names.
    """

    def __init__(self) -> None:
        self.files: list[AtomicFile] = []

    def add(self, target: str | os.PathLike[str], mode: str = "wb", **options: Any) -> AtomicFile:
        file = AtomicFile(target, mode, **options)
        self.files.append(file)
        return file

    def commit(self) -> None:
        """Finish any file not yet prepared, then install each (temps are complete first, so a
        failure here leaves at most a rename undone, never a partial file)."""
        try:
            for file in self.files:
                file.prepare()
        except BaseException:
            self.abort()
            raise
        for done, file in enumerate(self.files, 1):
            try:
                file.commit()
            except BaseException:
                for rest in self.files[done:]:
                    rest.abort()
                raise

    def abort(self) -> None:
        for file in self.files:
            file.abort()

    def __enter__(self) -> InstallSet:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
