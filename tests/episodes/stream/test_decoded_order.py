"""Decoding a resident episode's frames in any request order: each frame once, and a newly
resident episode's first frame costs its GOP, not the frames before it."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.episodes.stream.decoded import (
    DECODE_AHEAD,
    MAX_CURSORS_PER_SLOT,
    CameraFrames,
    DecodedFrames,
)
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import MiniMp4, decode_span, fetch_span, plan_span
from feedline.episodes.video.mp4.table import SampleTable
from feedline.io import open_store
from tests.episodes import mp4_factory as factory

BIG = 1 << 40


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[SampleTable, MiniMp4, dict[int, np.ndarray]]]:
    """Per corpus file: its table, one mini-MP4 of the whole file, and every frame's RGB."""
    root = tmp_path_factory.mktemp("decoded-order")
    files = factory.build_corpus(root)
    store = open_store(str(root))
    reader = VideoFrameReader(store)
    out = {}
    for path in sorted(files):
        table = reader.table(path)
        mini = fetch_span(store, path, table, plan_span(table, 0, len(table) - 1))
        frames = {t: f.to_ndarray(format="rgb24") for t, f in decode_span(mini, path).items()}
        out[path] = (table, mini, frames)
    return out


def _camera(video: tuple[SampleTable, MiniMp4, dict], limit: int = BIG, decoders: int = 64) -> tuple[CameraFrames, DecodedFrames]:
    table, mini, _ = video
    decoded = DecodedFrames(limit, decoders)
    return CameraFrames(decoded, table, [mini], "video.mp4"), decoded


def _gop_of(table: SampleTable, frames: dict[int, np.ndarray], tick: int) -> int:
    """Frames a decoder outputs from the keyframe before ``tick`` up to it (presentation order)."""
    ticks = sorted(frames)
    sample = int(np.flatnonzero(np.asarray(table.pts_ticks) == tick)[0])
    key = int(np.flatnonzero(table.sync[: sample + 1])[-1])
    start = min(int(table.pts_ticks[s]) for s in range(key, sample + 1))
    return ticks.index(tick) - ticks.index(min(t for t in ticks if t >= start)) + 1


def test_first_frame_of_a_fresh_episode_decodes_its_gop_only(videos) -> None:
    for path, video in videos.items():
        table, _, frames = video
        ticks = sorted(frames)
        late = ticks[len(ticks) * 3 // 4]
        camera, decoded = _camera(video)
        assert np.array_equal(camera.get([late])[0], frames[late]), path
        # the GOP holding it (B-frame reordering may add the frames presented before it), then
        # the frames the decoder goes on to while it is at it
        after = ticks[ticks.index(late) + 1 : ticks.index(late) + 1 + DECODE_AHEAD]
        first = decoded.counters.decoded_frames
        assert first <= _gop_of(table, frames, late) + 3 + len(after), path
        assert first - len(after) < ticks.index(late) + 1, path
        # those are kept: asking for them decodes nothing more
        for tick, image in zip(after, camera.get(after), strict=True):
            assert np.array_equal(image, frames[tick]), (path, tick)
        assert decoded.counters.decoded_frames == first, path


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), window=st.integers(1, 4))
def test_any_request_order_decodes_every_frame_once(videos, seed: int, window: int) -> None:
    rng = random.Random(seed)
    for path, video in videos.items():
        _, _, frames = video
        ticks = sorted(frames)
        camera, decoded = _camera(video)
        anchors = list(range(len(ticks)))
        rng.shuffle(anchors)
        for a in anchors:  # a window ending at each anchor, edges clamped (as samples ask)
            want = [ticks[max(0, a - k)] for k in range(window - 1, -1, -1)]
            got = camera.get(want)
            for tick, image in zip(want, got, strict=True):
                assert np.array_equal(image, frames[tick]), (path, tick)
        c = decoded.counters
        assert c.delivered_frames == len(ticks), path
        assert c.decoded_frames == len(ticks) and c.redecoded_frames == 0, (path, c)
        assert decoded.open_decoders <= MAX_CURSORS_PER_SLOT
        camera.close()
        assert decoded.open_decoders == 0 and decoded.counters.decoded_bytes == 0


def test_a_full_decoder_cache_re_decodes_but_stays_exact(videos) -> None:
    """One decoder for two cameras: each open closes the other's, frames stay exact."""
    path = next(p for p in videos if "h264_multi" in p)
    table, mini, frames = videos[path]
    decoded = DecodedFrames(BIG, 1)
    cams = [CameraFrames(decoded, table, [mini], f"cam{i}.mp4") for i in range(2)]
    ticks = sorted(frames)
    order = list(range(len(ticks)))
    random.Random(3).shuffle(order)
    for a in order:
        for cam in cams:
            assert np.array_equal(cam.get([ticks[a]])[0], frames[ticks[a]])
    assert decoded.open_decoders <= 1
    assert decoded.counters.delivered_frames == 2 * len(ticks)


def test_sample_tensors_never_share_the_kept_frames(videos) -> None:
    """``get`` hands out the kept frames themselves; the sample's tensor is always a copy."""
    from feedline.episodes.assemble import frames_to_tensor

    path = sorted(videos)[0]
    _, _, frames = videos[path]
    ticks = sorted(frames)[:3]
    camera, _ = _camera(videos[path])
    for window in (ticks, ticks[:1]):
        tensor = frames_to_tensor(camera.get(window), return_uint8=True)
        tensor.fill_(7)  # a user's in-place transform
        for tick, image in zip(window, camera.get(window), strict=True):
            assert np.array_equal(image, frames[tick])
