"""The tagger registry: ``@add_tagger("name")`` and ``--tagger-modules`` plugin loading.

User modules are imported *before* tagger names are resolved (Dolma issue #128 resolved them
first and reported "Unknown tagger"), in the parent and again in every worker process.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from feedline.curate.errors import CurateError

if TYPE_CHECKING:
    from feedline.curate.taggers.base import BaseTagger

T = TypeVar("T", bound="type[BaseTagger]")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
_TAGGERS: dict[str, type[BaseTagger]] = {}
_IMPORTED_PATHS: set[str] = set()


def check_name(name: str, what: str = "tagger") -> str:
    """Tagger and experiment names become the first parts of ``exp__tagger__signal`` keys."""
    if not _NAME.match(name) or "__" in name:
        raise CurateError(
            f"invalid {what} name {name!r}: use letters, digits, '_', '.', '-' and no '__' "
            "(it separates experiment, tagger and signal in attribute keys)"
        )
    return name


def add_tagger(name: str) -> Callable[[T], T]:
    """Register a tagger class under ``name``; a second, different class with the name is an error."""
    check_name(name)

    def register(cls: T) -> T:
        existing = _TAGGERS.get(name)
        if existing is not None and _qualname(existing) != _qualname(cls) and cls.__module__ != "__main__":
            raise CurateError(f"tagger {name!r} is already registered by {_qualname(existing)}")
        cls.name = name
        _TAGGERS[name] = cls
        return cls

    return register


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def load_builtin_taggers() -> None:
    """Import feedline's own tagger families (cheap: no model is loaded until a tagger is built)."""
    importlib.import_module("feedline.curate.taggers")


def import_tagger_modules(modules: list[str] | tuple[str, ...] | None) -> None:
    """Import user tagger modules given as dotted names or as paths to ``.py`` files/packages."""
    for module in modules or ():
        if os.path.exists(module):
            _import_path(module)
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                raise CurateError(f"tagger module {module!r}: not an importable module nor an existing path") from None
            raise


def _import_path(path: str) -> None:
    path = os.path.abspath(path)
    if path in _IMPORTED_PATHS:
        return
    target = os.path.join(path, "__init__.py") if os.path.isdir(path) else path
    name = "feedline_user_taggers_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise CurateError(f"tagger module {path}: cannot be imported (not a .py file or package)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except CurateError:
        raise
    except Exception as exc:
        del sys.modules[name]
        raise CurateError(f"tagger module {path}: import failed ({type(exc).__name__}: {exc})") from exc
    _IMPORTED_PATHS.add(path)


def get_tagger(name: str) -> type[BaseTagger]:
    """The class registered under ``name``; an unknown name lists the closest known ones."""
    load_builtin_taggers()
    try:
        return _TAGGERS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_TAGGERS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `feedline list-taggers`"
        raise CurateError(f"unknown tagger {name!r}{hint}") from None


def list_taggers() -> dict[str, type[BaseTagger]]:
    """Every registered tagger by name, sorted."""
    load_builtin_taggers()
    return dict(sorted(_TAGGERS.items()))
