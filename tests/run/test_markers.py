"""Done markers count only for the parameters they were written under."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from feedline.run.markers import DoneMarker, params_digest


def test_marker_round_trip_and_parameter_tie(tmp_path: Path) -> None:
    path = str(tmp_path / "sub" / "a.done")
    marker = DoneMarker(path, params_digest({"threshold": 0.8}))
    assert marker.read() is None
    marker.write(documents=3)
    assert marker.read()["documents"] == 3
    assert DoneMarker(path, params_digest({"threshold": 0.9})).read() is None
    marker.clear()
    assert marker.read() is None
    marker.clear()  # clearing twice is fine


def test_a_damaged_marker_means_not_done(tmp_path: Path) -> None:
    path = tmp_path / "b.done"
    path.write_bytes(b"{half")
    assert DoneMarker(str(path), "x").read() is None
    path.write_bytes(b"[1, 2]")
    assert DoneMarker(str(path), "x").read() is None


@given(st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=6))
def test_digest_ignores_key_order(params: dict[str, int]) -> None:
    reordered = dict(reversed(list(params.items())))
    assert params_digest(params) == params_digest(reordered)
