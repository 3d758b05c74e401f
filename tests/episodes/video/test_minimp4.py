"""Mini-MP4 synthesis: exact size prediction, frame-exact decode, writer invariants."""

from __future__ import annotations

import io
import random
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import Mp4Error
from feedline.episodes.video import minimp4
from feedline.episodes.video.mp4.table import SampleTable, read_table
from feedline.episodes.video.mp4.writer import build_header
from feedline.io import open_store
from tests.episodes import mp4_factory as factory
from tests.episodes.oracle import decode_all


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("minimp4")
    return root, factory.build_corpus(root, extra=True)


def table_of(data: bytes) -> SampleTable:
    return read_table(lambda s, e: data[s:e], len(data), "mini.mp4")


def ranges_for(times: list[float], seed: int) -> list[tuple[float, float]]:
    """Fixed shapes (single frames at GOP edges, whole file, tails) plus random ranges."""
    rng = random.Random(seed)
    n = len(times)
    out = [(times[0], times[-1]), (times[0], times[0]), (times[-1], times[-1])]
    out += [(times[i], times[min(n - 1, i + 2)]) for i in range(0, n, 7)]
    for _ in range(8):
        a = rng.randrange(n)
        b = min(n - 1, a + rng.randrange(1, 12))
        out.append((times[a], times[b]))
    return out


@pytest.mark.parametrize("mode", minimp4.SPAN_MODES)
def test_every_range_decodes_exactly_and_size_is_predicted(
    corpus: tuple[Path, dict[str, Path]], mode: str
) -> None:
    root, files = corpus
    store = open_store(str(root))
    checks = 0
    for seed, (name, path) in enumerate(sorted(files.items())):
        table = read_table(lambda s, e, n=name: store.read_range(n, s, e), path.stat().st_size, name)
        truth = decode_all(path)
        times = [t for t, _ in truth]
        for t0, t1 in ranges_for(times, seed):
            samples = minimp4.samples_between(table, t0, t1, 0.0)
            expected = [(t, img) for t, img in truth if t0 <= t <= t1]
            assert len(samples) == len(expected)
            got: dict[float, np.ndarray] = {}
            for first, last in minimp4.covering_spans(table, samples, name, mode):
                plan = minimp4.plan_span(table, first, last)
                mini = minimp4.fetch_span(store, name, table, plan)
                assert len(mini.data) == plan.size == mini.plan.layout.total_size
                frames = minimp4.decode_span(mini, name)
                for tick, frame in frames.items():
                    got[float(tick) * 1 / table.info.timescale] = frame.to_ndarray(format="rgb24")
            for t, img in expected:
                assert np.array_equal(got[t], img), (name, t0, t1, t)
            checks += 1
    assert checks > 80


def test_synthesized_file_invariants(corpus: tuple[Path, dict[str, Path]]) -> None:
    """Only sample 1 is sync, ctts is v0 and non-negative, the edit list keeps original times."""
    root, files = corpus
    store = open_store(str(root))
    for name in ("videos/h264_bf3_negcts.mp4", "videos/h264_opengop.mp4", "videos/h264_multi.mp4"):
        size = files[name].stat().st_size
        table = read_table(lambda s, e, n=name: store.read_range(n, s, e), size, name)
        first, last = minimp4.frame_span(table, int(table.sync_index[1]) + 2, name)
        mini = minimp4.fetch_span(store, name, table, minimp4.plan_span(table, first, last))
        inner = table_of(mini.data)
        assert inner.sync.tolist() == [True] + [False] * (len(inner) - 1)
        assert inner.info.ctts_version == 0 and (inner.ctts >= 0).all()
        assert np.array_equal(np.sort(inner.pts_ticks[inner.presented]), mini.plan.pts_ticks)
        with av.open(io.BytesIO(mini.data)) as container:
            times = [f.time for f in container.decode(video=0)]
        original = sorted(t for t, _ in decode_all(files[name]))
        assert set(times) <= set(original)


def test_open_gop_leading_frames_start_at_earlier_keyframe(corpus: tuple[Path, dict[str, Path]]) -> None:
    root, files = corpus
    name = "videos/h264_opengop.mp4"
    data = files[name].read_bytes()
    table = table_of(data)
    cts = table.dts + table.ctts
    key = int(table.sync_index[1])
    leading = [i for i in range(key + 1, len(table)) if cts[i] < cts[key]]
    assert leading, "x264 open-gop should give leading pictures"
    first, _ = minimp4.frame_span(table, leading[0])
    assert first == int(table.sync_index[0])


def test_large_layout_co64_and_64bit_mdat(corpus: tuple[Path, dict[str, Path]]) -> None:
    root, files = corpus
    name = "videos/h264_single_end.mp4"
    data = files[name].read_bytes()
    table = table_of(data)
    layout, ticks, _ = build_header(table, 0, len(table) - 1, force_large=True)
    payload = b"".join(data[o : o + s] for o, s in zip(table.offset.tolist(), table.size.tolist(), strict=True))
    mini = layout.header + payload
    assert len(mini) == layout.total_size
    assert b"co64" in layout.header and layout.header[-16:-8] == b"\x00\x00\x00\x01mdat"
    back = table_of(mini)
    assert np.array_equal(back.size, table.size)
    got = decode_all(mini)
    truth = decode_all(files[name])
    assert [t for t, _ in got] == [t for t, _ in truth]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, truth, strict=True))


def test_merge_ranges() -> None:
    starts = np.array([100, 0, 50, 10_000])
    ends = np.array([150, 50, 60, 10_010])
    assert minimp4.merge_ranges(starts, ends) == [(0, 150), (10_000, 10_010)]
    assert minimp4.merge_ranges(starts, ends, gap=0) == [(0, 60), (100, 150), (10_000, 10_010)]


_EDIT_VIDEO: dict[str, bytes] = {}


def _edit_video(corpus: tuple[Path, dict[str, Path]]) -> bytes:
    if "data" not in _EDIT_VIDEO:
        _EDIT_VIDEO["data"] = corpus[1]["videos/h264_single_end.mp4"].read_bytes()
    return _EDIT_VIDEO["data"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    empty_ms=st.one_of(st.just(0), st.integers(1, 3000)),
    media_time=st.integers(0, 12 * 1024),
    duration_ms=st.integers(1, 4500),
)
def test_any_supported_edit_list_matches_pyav(
    corpus: tuple[Path, dict[str, Path]], tmp_path_factory: pytest.TempPathFactory,
    empty_ms: int, media_time: int, duration_ms: int,
) -> None:
    """Random edit lists on a real B-frame file: accepted ones give PyAV's timeline and pixels."""
    data = _edit_video(corpus)
    entries = ([(empty_ms, -1, 1, 0)] if empty_ms else []) + [(duration_ms, media_time, 1, 0)]
    patched = factory.replace_box(data, ["moov", "trak", "edts", "elst"], factory.elst_box(entries))
    try:
        table = table_of(patched)
    except Mp4Error as exc:
        assert "presents no sample" in str(exc)
        return
    path = tmp_path_factory.mktemp("edits") / "e.mp4"
    path.write_bytes(patched)
    truth = decode_all(path)
    assert np.sort(table.pts[table.presented]).tolist() == [t for t, _ in truth]
    store = open_store(str(path.parent))
    decoded: dict[int, av.VideoFrame] = {}
    for first, last in minimp4.covering_spans(table, np.flatnonzero(table.presented), "e.mp4"):
        mini = minimp4.fetch_span(store, "e.mp4", table, minimp4.plan_span(table, first, last))
        decoded.update(minimp4.decode_span(mini, "e.mp4"))
    assert len(decoded) == len(truth)
    for t, img in truth:
        frame = decoded[int(round(t * table.info.timescale))]
        assert np.array_equal(frame.to_ndarray(format="rgb24"), img)
