"""Every episode's span and mini-MP4 size from one array pass equal the per-episode writer's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.episodes.format import load_meta
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import covering_spans, plan_span, samples_between
from feedline.episodes.video.spans import span_bounds, span_sizes
from feedline.io import open_store

TOLERANCE_S = 1e-4


def _tables(root):
    store = open_store(str(root))
    reader = VideoFrameReader(store)
    return load_meta(store), reader


@pytest.mark.parametrize("dataset", ["av1_dataset", "h264_dataset"])
def test_every_episode_matches_the_per_episode_plan(dataset, request):
    """H.264 with B-frames, ctts and an edit list, and AV1 across concatenated files."""
    meta, reader = _tables(request.getfixturevalue(dataset).root)
    table, fps = meta.episodes, meta.fps
    checked = 0
    for key in table.video_path:
        for path, positions in table.positions_by_video_file(key).items():
            samples = reader.table(path)
            t0 = table.from_timestamp[key][positions]
            t1 = np.maximum(table.to_timestamp[key][positions] - 1 / fps,
                            t0 + (table.length[positions] - 1) / fps)
            first, last = span_bounds(samples, t0, t1, TOLERANCE_S)
            sizes = span_sizes(samples, first, last)
            for j in range(len(positions)):
                wanted = samples_between(samples, float(t0[j]), float(t1[j]), TOLERANCE_S)
                plans = [plan_span(samples, a, b) for a, b in covering_spans(samples, wanted)]
                assert [(p.first, p.last) for p in plans] == [(first[j], last[j])]
                assert plans[0].size == sizes[j]
                checked += 1
    assert checked == sum(len(table) for _ in table.video_path)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_time_range_matches_the_writer(h264_dataset, data):
    """Random ranges of a reordered video, including ones starting at its first frame (the
    writer's own path) and ones that end mid-GOP."""
    meta, reader = _tables(h264_dataset.root)
    path = meta.episodes.video_files()[0]
    samples = reader.table(path)
    times = samples.display_pts
    n = data.draw(st.integers(1, 8))
    lo = np.array(data.draw(st.lists(st.integers(0, len(times) - 1), min_size=n, max_size=n)))
    width = np.array(data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)))
    hi = np.minimum(lo + width, len(times) - 1)
    first, last = span_bounds(samples, times[lo], times[hi], TOLERANCE_S)
    sizes = span_sizes(samples, first, last)
    for j in range(n):
        spans = covering_spans(samples, samples_between(samples, times[lo[j]], times[hi[j]], TOLERANCE_S))
        assert spans == [(first[j], last[j])]
        assert plan_span(samples, *spans[0]).size == sizes[j]


def test_a_range_without_frames_names_the_file(av1_dataset):
    from feedline.episodes.errors import SidecarError

    meta, reader = _tables(av1_dataset.root)
    path = meta.episodes.video_files()[0]
    with pytest.raises(SidecarError, match="no frame between"):
        span_bounds(reader.table(path), np.array([1e6]), np.array([1e6 + 1]), TOLERANCE_S, path)
