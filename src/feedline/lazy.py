"""One way for a package to export names that load on first use.

A package face (``feedline.io``, ``feedline.episodes`` ...) lists ``name -> module`` and hands
the table to :func:`lazy_exports`; ``import feedline.io`` then costs nothing until a name is used,
so a local-only command never pays for torch, numpy, fsspec or the HTTP client at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose ``exports`` map a name to its module.

    Args:
        package: the package's ``__name__``, for the ``AttributeError`` message.
        exports: public name -> dotted module that defines it.
        namespace: the package's ``globals()``; a loaded name is cached there, so the module-level
            ``__getattr__`` runs once per name.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
