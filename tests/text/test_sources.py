"""Token sources: a root, TokenSource objects or dicts of their fields; bad quotas refused by name."""

from __future__ import annotations

import pytest

from feedline.streaming.errors import MixtureError
from feedline.text.errors import TextError
from feedline.text.sources import TokenSource, as_sources


def test_the_forms_a_source_takes():
    (one,) = as_sources("s3://b/tokens", {"anon": True})
    assert one.root == "s3://b/tokens" and one.storage_options == {"anon": True} and one.label == "tokens"
    two = as_sources([TokenSource("a/web", weight=3), {"root": "b/code/", "choose": 10, "name": "code"}], None)
    assert [s.label for s in two] == ["web", "code"] and two[1].quota.choose == 10
    assert as_sources(TokenSource("x", repeat=2), {"k": 1})[0].storage_options == {"k": 1}


def test_bad_sources_are_one_line_errors():
    with pytest.raises(MixtureError, match="source web: give one of weight, repeat or choose, not weight and repeat"):
        as_sources([TokenSource("a/web", weight=1, repeat=2)], None)[0].quota  # noqa: B018
    with pytest.raises(TextError, match="a token source takes root, weight"):
        as_sources([{"root": "a", "wieght": 1}], None)
    with pytest.raises(TextError, match="not a token source"):
        as_sources([3], None)
    with pytest.raises(TextError, match="no token sources"):
        as_sources([], None)
