"""Every public class of feedline.episodes documents every constructor argument in ``Args:``."""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
import re
from typing import Protocol

import pytest

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.mapstyle import EpisodeDataset

# The map-style reader passes everything to the shared base; users read its docstring.
DOCUMENTED_ON = {EpisodeDatasetBase: EpisodeDataset}
SIGNATURE_OF = {EpisodeDataset: EpisodeDatasetBase}


def _public_classes() -> list[type]:
    found = []
    import feedline.streaming

    walked = [*pkgutil.walk_packages(feedline.episodes.__path__, "feedline.episodes."),
              *pkgutil.walk_packages(feedline.streaming.__path__, "feedline.streaming.")]
    for module_info in walked:
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and obj.__module__ == module.__name__
                    and not name.startswith("_")):
                found.append(obj)
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def _arguments(cls: type) -> list[str]:
    if issubclass(cls, BaseException) and "__init__" not in vars(cls):
        return []  # the message only
    if issubclass(cls, enum.Enum) or Protocol in cls.__bases__:
        return []
    signature = inspect.signature(SIGNATURE_OF.get(cls, cls))
    return [name for name, p in signature.parameters.items()
            if not name.startswith("_") and name != "self"
            and p.kind is not inspect.Parameter.VAR_POSITIONAL]


CLASSES = _public_classes()


def test_the_walk_finds_the_classes_users_construct() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"EpisodeDataset", "StreamingEpisodeDataset", "ByteBudget", "EpisodePool",
            "UnitPipeline", "Sidecar", "VideoFrameReader"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__qualname__)
def test_every_argument_is_documented(cls: type) -> None:
    arguments = _arguments(cls)
    if not arguments:
        return
    docs = "".join(inspect.getdoc(c) or "" for c in DOCUMENTED_ON.get(cls, cls).__mro__
                   if c.__module__.startswith("feedline."))
    assert "Args:" in docs, f"{cls.__qualname__} has no Args: block"
    missing = [name for name in arguments if not re.search(rf"^\s+(\*\*)?{name}:", docs, re.M)]
    assert not missing, f"{cls.__qualname__} does not document {missing}"
