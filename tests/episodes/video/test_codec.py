"""Persistent span decoders decode exactly what a container over the same mini-MP4 decodes."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import av
import numpy as np
import pytest

from feedline.episodes.video.codec import SpanDecoder, codec_config
from feedline.episodes.video.frames import VideoFrameReader
from feedline.episodes.video.minimp4 import decode_span, fetch_span, frame_span, plan_span
from feedline.episodes.video.mp4.table import SampleTable
from feedline.io import open_store
from tests.episodes import mp4_factory as factory


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("codec")
    return root, factory.build_corpus(root, extra=True)


def _spans(table: SampleTable, seed: int) -> list[tuple[int, int]]:
    """Every single-frame span plus a few random multi-GOP ones."""
    spans = {frame_span(table, s) for s in range(len(table))}
    rng = random.Random(seed)
    for _ in range(6):
        a, b = sorted(rng.sample(range(len(table)), 2))
        spans.add((frame_span(table, a)[0], frame_span(table, b)[1]))
    return sorted(spans)


def _rgb(frames: dict[int, av.VideoFrame]) -> dict[int, np.ndarray]:
    return {tick: frame.to_ndarray(format="rgb24") for tick, frame in frames.items()}


def test_span_decoder_equals_container_decode(corpus: tuple[Path, dict[str, Path]]) -> None:
    root, files = corpus
    store = open_store(str(root))
    reader = VideoFrameReader(store)
    for i, path in enumerate(sorted(files)):
        table = reader.table(path)
        decoder = SpanDecoder(table, path)
        for first, last in _spans(table, seed=i):
            mini = fetch_span(store, path, table, plan_span(table, first, last))
            expected, got = _rgb(decode_span(mini, path)), _rgb(decoder.decode(mini))
            assert got.keys() == expected.keys(), (path, first, last)
            for tick in expected:
                assert np.array_equal(got[tick], expected[tick]), (path, first, last, tick)
        # every corpus codec (AV1, H.264 with B-frames, open GOP, negative cts) decodes without a container
        assert decoder.fallbacks == 0, path


def test_unknown_sample_entry_goes_through_a_container(corpus: tuple[Path, dict[str, Path]]) -> None:
    root, files = corpus
    store = open_store(str(root))
    path = sorted(files)[0]
    table = VideoFrameReader(store).table(path)
    # the same track described without a configuration box a bare codec context could take
    bare = dataclasses.replace(table.info, stsd=table.info.stsd[: 16 + 8 + 78])
    assert codec_config(bare) is None
    decoder = SpanDecoder(dataclasses.replace(table, info=bare), path)
    mini = fetch_span(store, path, table, plan_span(table, *frame_span(table, 0)))
    assert _rgb(decoder.decode(mini)).keys() == _rgb(decode_span(mini, path)).keys()
    assert decoder.fallbacks == 1


def test_map_style_reads_open_no_container_per_span(
    corpus: tuple[Path, dict[str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy on ``av.open`` (counting, not replacing it): frame reads after the index is built
    open no container at all."""
    root, files = corpus
    reader = VideoFrameReader(open_store(str(root)), decoder_cache_size=0)
    path = next(p for p in sorted(files) if "h264_multi" in p)
    table = reader.table(path)
    opened = []
    real_open = av.open
    monkeypatch.setattr(av, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    times = table.pts[table.presented].tolist()
    for t in times[::3]:
        reader.frames_at(path, [t])
    assert opened == []
