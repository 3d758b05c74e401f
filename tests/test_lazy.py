"""Package faces export through feedline.lazy: every listed name resolves, nothing loads early."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

FACES = ["feedline.io", "feedline.acquire", "feedline.dedup", "feedline.curate", "feedline.episodes"]


@pytest.mark.parametrize("face", FACES)
def test_every_exported_name_resolves_and_is_listed(face: str) -> None:
    module = importlib.import_module(face)
    assert sorted(module.__all__) == sorted(module._EXPORTS)
    for name in module.__all__:
        value = getattr(module, name)
        assert getattr(value, "__name__", name) == name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"{face}.*no_such_name"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    ("face", "heavy"),
    [
        ("feedline.io", ["fsspec", "urllib3", "http.client"]),
        ("feedline.acquire", ["numpy", "fsspec"]),
        ("feedline.dedup", ["numpy"]),
        ("feedline.curate", ["msgspec", "fsspec"]),
        ("feedline.episodes", ["torch", "av", "pyarrow"]),
        # a local-only tagging worker reads and writes files without the HTTP client or fsspec
        ("feedline.curate.files", ["fsspec", "urllib3", "http.client"]),
    ],
)
def test_importing_a_face_loads_nothing_heavy(face: str, heavy: list[str]) -> None:
    code = f"import sys, {face}; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_part_has_one_error_root() -> None:
    from feedline.acquire.errors import AcquireError
    from feedline.curate.errors import CurateError
    from feedline.dedup.errors import DedupError
    from feedline.episodes.errors import EpisodesError
    from feedline.errors import FeedlineError
    from feedline.io.errors import IoError

    for root in (AcquireError, CurateError, DedupError, EpisodesError, IoError):
        assert root.__bases__ == (FeedlineError,)
