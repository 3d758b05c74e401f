"""Small files read whole, local or remote: markers, run summaries, manifests of a previous run.

Why one reader: a done marker, a mix summary and a tagger's saved verdicts are all "the bytes of
this file, or nothing if it is not there", and the answer must be the same whether the folder is
local or a store URL. A local read never loads the HTTP client or fsspec.
"""

from __future__ import annotations

from feedline.io.paths import is_url, local_path

__all__ = ["read_small"]


def read_small(path: str) -> bytes | None:
    """The contents of the file at ``path`` (a local path or store URL), or None when it does
    not exist."""
    if not is_url(path):
        try:
            with open(local_path(path), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
    from feedline.io.errors import NotFoundError
    from feedline.io.open import open_object

    store, name = open_object(path)
    try:
        return store.read_bytes(name)
    except NotFoundError:
        return None
    finally:
        store.close()
