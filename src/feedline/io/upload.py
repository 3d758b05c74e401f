"""Atomic writes to any target, URLs included: staged locally, put as one object on commit.

:mod:`feedline.io.atomic` installs files and knows no stores, because stores write through it
(``LocalStore.write_bytes``). This module sits above both it and :mod:`feedline.io.open`
(``atomic`` → ``store`` → ``open`` → ``upload``: imports run one way) and gives
:class:`~feedline.io.atomic.AtomicFile` the upload a URL target needs. ``open`` is imported at
the first upload, so a writer of local files never loads the HTTP client or fsspec.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from feedline.io.atomic import AtomicFile
from feedline.io.paths import is_url


def upload_file(target: str, staged: Path) -> None:
    """Put the complete local file ``staged`` at the URL ``target`` in one write; the store
    opened for it is closed again."""
    from feedline.io.open import open_object

    store, name = open_object(target)
    with store:
        store.write_bytes(name, staged.read_bytes())


def atomic_file(
    target: str | os.PathLike[str], mode: str = "wb", *, durable: bool = True, **open_kwargs: Any
) -> AtomicFile:
    """An :class:`~feedline.io.atomic.AtomicFile` for ``target``, a local path or a URL."""
    url = os.fspath(target)
    upload = (lambda staged: upload_file(url, staged)) if is_url(url) else None
    return AtomicFile(target, mode, durable=durable, upload=upload, **open_kwargs)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", *, durable: bool = True, **open_kwargs: Any
) -> Iterator[IO[Any]]:
    """Write ``path`` (a local path or a URL) all-or-nothing: a handle whose file replaces
    ``path`` when the block ends without an exception; on any exception the old file stays.

    Args:
        path: the target; a URL is staged in a local temp file and uploaded on commit.
        mode: ``"wb"`` (default) or ``"w"``.
        durable: see :class:`~feedline.io.atomic.AtomicFile`.
        **open_kwargs: as for ``open()`` (``encoding`` ...).
    """
    with atomic_file(path, mode, durable=durable, **open_kwargs) as output:
        yield output.handle
