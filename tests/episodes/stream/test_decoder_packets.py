"""The streaming reader's forward decoder: samples fed as packets equal a container's decode.

Real PyAV-encoded MP4s (AV1, H.264 with B-frames, open GOP, negative composition offsets) from
the MP4 corpus factory; every frame of every span is compared pixel for pixel.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes.errors import Mp4Error
from feedline.episodes.stream import decoded as decoded_module
from feedline.episodes.stream.decoded import _Decoder, cut_mini
from feedline.episodes.video.frames import VideoFrameReader, rgb_array
from feedline.episodes.video.minimp4 import fetch_span, frame_span, plan_span
from feedline.io import open_store
from tests.episodes import mp4_factory as factory


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("decoder")
    return root, factory.build_corpus(root, extra=True)


def _drain(decoder: _Decoder) -> list[tuple[int, np.ndarray]]:
    return [(tick, rgb_array(frame)) for tick, frame in
            (decoder.next_frame() for _ in range(len(decoder.wanted)))]


def test_packets_equal_the_container_on_every_corpus_file(corpus) -> None:
    root, files = corpus
    store = open_store(str(root))
    reader = VideoFrameReader(store)
    for path in sorted(files):
        table = reader.table(path)
        whole = fetch_span(store, path, table, plan_span(table, 0, len(table) - 1))
        # from every keyframe to the end: what a cursor opened at that keyframe decodes
        for first in sorted({frame_span(table, s)[0] for s in range(len(table))}):
            mini = cut_mini(table, whole, first, whole.plan.last)
            packets, container = _Decoder(mini, path, table), _Decoder(mini, path)
            assert packets.context is not None and packets.container is None, path
            assert container.container is not None
            got, want = _drain(packets), _drain(container)
            assert [t for t, _ in got] == [t for t, _ in want] == sorted(mini.plan.pts_ticks.tolist())
            for (tick, a), (_, b) in zip(got, want, strict=True):
                assert np.array_equal(a, b), (path, first, tick)
            for decoder in (packets, container):
                decoder.close()
                with pytest.raises(Mp4Error, match="after it was closed"):
                    decoder.next_frame()


def test_unknown_sample_entry_decodes_through_a_container(corpus) -> None:
    root, files = corpus
    store = open_store(str(root))
    path = sorted(files)[0]
    table = VideoFrameReader(store).table(path)
    bare = dataclasses.replace(table, info=dataclasses.replace(table.info, stsd=table.info.stsd[: 16 + 8 + 78]))
    mini = fetch_span(store, path, table, plan_span(table, 0, len(table) - 1))
    decoder = _Decoder(mini, path, bare)
    assert decoder.context is None and decoder.container is not None
    assert [t for t, _ in _drain(decoder)] == sorted(mini.plan.pts_ticks.tolist())


def test_a_packet_path_that_falls_short_finishes_through_a_container(corpus, monkeypatch) -> None:
    """Mock: a bare codec context that stops producing frames mid-span cannot be caused with a
    well-formed file, so the packet generator is cut after two frames. The decoder must go on
    through a container from where it stopped: the same ticks, no frame twice."""
    root, files = corpus
    store = open_store(str(root))
    path = next(p for p in sorted(files) if "h264" in p)
    table = VideoFrameReader(store).table(path)
    mini = fetch_span(store, path, table, plan_span(table, 0, len(table) - 1))
    real = _Decoder._packet_frames

    def short(context, table, mini):
        frames = real(context, table, mini)
        yield next(frames)
        yield next(frames)

    monkeypatch.setattr(decoded_module._Decoder, "_packet_frames", staticmethod(short))
    decoder = _Decoder(mini, path, table)
    got = _drain(decoder)
    assert decoder.context is None and decoder.container is not None  # it fell back
    monkeypatch.undo()
    want = _drain(_Decoder(mini, path))
    assert [t for t, _ in got] == [t for t, _ in want]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
