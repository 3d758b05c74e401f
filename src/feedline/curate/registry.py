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


#: Built-in tagger name -> its module, so a run imports only the families it uses (a worker
#: running char_length_v1 does not pay for numpy, regex and pycld2). A test keeps it complete.
BUILTIN_TAGGERS = {
    **dict.fromkeys(
        ("char_length_v1", "char_length_strip_ws_v1", "char_length_with_paragraphs_v1", "bytes_length_v1",
         "doc_count_v1", "whitespace_tokenizer_v1", "whitespace_tokenizer_with_paragraphs_v1", "counts_v1"),
        "counts",
    ),
    "gopher_v1": "gopher",
    "c4_v1": "c4",
    "c4_v2": "c4",
    **dict.fromkeys(("pii_regex_v1", "pii_regex_v2", "pii_regex_with_counts_v2", "pii_regex_with_counts_fast_v2"), "pii"),
    **dict.fromkeys(("cld2_en_doc_v2", "cld2_en_paragraph_v2", "cld2_en_paragraph_with_doc_score_v2", "cld2_doc_v1"),
                    "language"),
    "repetitions_v1": "repetition",
    "paragraph_repetitions_v1": "repetition",
    **dict.fromkeys(("ft_lang_id_en_doc_v2", "ft_lang_id_en_paragraph_v2", "ft_lang_id_en_paragraph_with_doc_score_v2",
                     "ft_lang_id_doc_v1", "ft_lang_id_paragraph_v1"), "fasttext_lid"),
    "minhash_near_dup_v1": "minhash",
    "random_number_v1": "random",
}


def load_builtin_taggers() -> None:
    """Import every built-in tagger family (for listing; runs import only what they use)."""
    for family in sorted(set(BUILTIN_TAGGERS.values())):
        importlib.import_module(f"feedline.curate.taggers.{family}")


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
    if name not in _TAGGERS and name in BUILTIN_TAGGERS:
        importlib.import_module(f"feedline.curate.taggers.{BUILTIN_TAGGERS[name]}")
    try:
        return _TAGGERS[name]
    except KeyError:
        load_builtin_taggers()
        close = difflib.get_close_matches(name, list(_TAGGERS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `feedline list-taggers`"
        raise CurateError(f"unknown tagger {name!r}{hint}") from None


def list_taggers() -> dict[str, type[BaseTagger]]:
    """Every registered tagger by name, sorted."""
    load_builtin_taggers()
    return dict(sorted(_TAGGERS.items()))
