"""Windows: delta_timestamps -> delta indices -> clamped query indices and pad masks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import DeltaTimestampsError
from feedline.episodes.windows import (
    check_delta_timestamps,
    delta_indices,
    query_window,
    query_windows,
)

FPS = st.sampled_from([5, 10, 15, 30, 50])


@given(
    fps=FPS,
    steps=st.lists(st.integers(-60, 60), min_size=1, max_size=12),
    jitter=st.floats(-9e-5, 9e-5),
)
def test_whole_frames_map_to_their_index(fps, steps, jitter):
    deltas = [k / fps + jitter for k in steps]
    out = delta_indices({"action": deltas}, fps, tolerance_s=1e-4)
    assert out["action"].dtype == np.int64
    assert out["action"].tolist() == steps


@given(fps=FPS, k=st.integers(-60, 60), off=st.floats(0.2, 0.8))
def test_fractions_of_a_frame_are_refused(fps, k, off):
    bad = (k + off) / fps
    with pytest.raises(DeltaTimestampsError, match="not multiples of 1/fps") as err:
        delta_indices({"observation.state": [0.0, bad]}, fps, tolerance_s=1e-4)
    assert "observation.state" in str(err.value) and "\n" not in str(err.value)


def test_tolerance_is_inclusive_like_lerobot():
    check_delta_timestamps({"a": [0.1 + 1e-4 - 1e-12]}, 10, 1e-4)
    with pytest.raises(DeltaTimestampsError):
        check_delta_timestamps({"a": [0.1 + 2e-4]}, 10, 1e-4)


def test_bad_keys_and_values():
    with pytest.raises(DeltaTimestampsError, match=r"unknown feature\(s\) \['nope'\]"):
        delta_indices({"nope": [0.0]}, 10, features=["action"])
    with pytest.raises(DeltaTimestampsError, match="empty"):
        delta_indices({"action": []}, 10)
    with pytest.raises(DeltaTimestampsError, match="not a number"):
        delta_indices({"action": [float("nan")]}, 10)
    with pytest.raises(DeltaTimestampsError, match="not a number"):
        delta_indices({"action": ["0.1"]}, 10)


@st.composite
def episode_and_anchor(draw):
    ep_from = draw(st.integers(0, 10_000))
    length = draw(st.integers(1, 80))
    anchor = ep_from + draw(st.integers(0, length - 1))
    deltas = np.array(
        draw(st.lists(st.integers(-100, 100), min_size=1, max_size=16)), dtype=np.int64
    )
    return anchor, deltas, ep_from, ep_from + length


@settings(max_examples=200)
@given(case=episode_and_anchor())
def test_clamping_and_pads(case):
    anchor, deltas, ep_from, ep_to = case
    idx, pad = query_window(anchor, deltas, ep_from, ep_to)
    wanted = anchor + deltas
    assert idx.shape == pad.shape == deltas.shape
    assert np.all((idx >= ep_from) & (idx < ep_to))  # never leaves the episode
    assert np.array_equal(pad, (wanted < ep_from) | (wanted >= ep_to))
    assert np.array_equal(idx[~pad], wanted[~pad])  # inside: exactly the wanted row
    assert np.all(idx[pad & (wanted < ep_from)] == ep_from)  # before: repeats the first row
    assert np.all(idx[pad & (wanted >= ep_to)] == ep_to - 1)  # after: repeats the last row
    assert not pad[deltas == 0].any()


@settings(max_examples=50)
@given(
    cases=st.lists(episode_and_anchor(), min_size=1, max_size=20),
    deltas=st.lists(st.integers(-30, 30), min_size=1, max_size=8),
)
def test_vectorised_equals_one_at_a_time(cases, deltas):
    d = np.array(deltas, dtype=np.int64)
    anchors = np.array([c[0] for c in cases])
    froms = np.array([c[2] for c in cases])
    tos = np.array([c[3] for c in cases])
    idx, pad = query_window(anchors, d, froms, tos)
    assert idx.shape == (len(cases), len(deltas))
    for i in range(len(cases)):
        one_idx, one_pad = query_window(int(anchors[i]), d, int(froms[i]), int(tos[i]))
        assert np.array_equal(idx[i], one_idx) and np.array_equal(pad[i], one_pad)
        assert one_idx.dtype == idx.dtype and one_pad.dtype == pad.dtype  # the scalar fast path too


def test_query_windows_names_pad_keys_like_lerobot():
    # fixture S of LeRobot's own measurement: ds[15] is episode 1 frame 0 (rows 15..54)
    deltas = delta_indices({"cam": [-0.2, -0.1, 0.0], "action": [k / 10 for k in range(10)]}, 10)
    idx, pads = query_windows(15, deltas, 15, 55)
    assert idx["cam"].tolist() == [15, 15, 15]
    assert pads["cam_is_pad"].tolist() == [True, True, False]
    assert not pads["action_is_pad"].any()
    idx, pads = query_windows(14, deltas, 0, 15)  # episode 0's last frame
    assert idx["action"].tolist() == [14] * 10
    assert pads["action_is_pad"].tolist() == [False] + [True] * 9
    assert list(pads) == ["cam_is_pad", "action_is_pad"]


def test_anchor_outside_episode_is_a_bug():
    with pytest.raises(ValueError):
        query_window(20, np.array([0]), 0, 20)


@given(
    length=st.integers(1, 40),
    start=st.integers(0, 1000),
    deltas=st.dictionaries(
        st.sampled_from(["action", "observation.state", "cam"]),
        st.lists(st.integers(-12, 12), min_size=1, max_size=6),
        min_size=1,
    ),
)
@settings(max_examples=100, deadline=None)
def test_episode_windows_equal_per_sample_windows(length, start, deltas):
    """The streaming reader's once-per-episode windows give what each sample computes alone:
    the same positions, masks, dtypes and keys, and masks that are each sample's own."""
    from feedline.episodes.assemble import EpisodeData, EpisodeWindows, SampleSpec, sample_windows

    spec = SampleSpec(
        video_keys=(), camera_keys=(),
        delta_indices={k: np.array(v, dtype=np.int64) for k, v in deltas.items()}, tasks=(),
    )
    episode = EpisodeData(3, start, {"index": np.arange(start, start + length)}, {}, {})
    windows = EpisodeWindows(spec, episode)
    for frame in range(length):
        rows, pads = windows.at(frame)
        want_rows, want_pads = sample_windows(spec, episode, frame)
        assert list(rows) == list(want_rows) and list(pads) == list(want_pads)
        for key in want_rows:
            assert rows[key].dtype == want_rows[key].dtype
            assert rows[key].tolist() == want_rows[key].tolist()
        for key in want_pads:
            assert pads[key].dtype == want_pads[key].dtype
            assert pads[key].tolist() == want_pads[key].tolist()
        for mask in pads.values():
            mask[:] = True  # a sample's mask is its own: the next samples are unaffected
    with pytest.raises(IndexError):
        windows.at(length)
