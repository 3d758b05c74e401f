"""Forked workers park the decoders their parent opened (feedline.episodes.video.fork).

Real decoders with live codec state in the parent, a real ``fork`` child that drops them and
collects garbage; a hang there is the failure this guards against.
"""

from __future__ import annotations

import gc
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes.stream.decoded import _Decoder
from feedline.episodes.video.codec import SpanDecoder
from feedline.episodes.video.frames import VideoFrameReader, rgb_array
from feedline.episodes.video.minimp4 import decode_span, fetch_span, frame_span, plan_span
from feedline.io import open_store
from tests.episodes.oracle import decode_all

NAME = "videos/av1_multi.mp4"


def _in_child(span: SpanDecoder, forward: _Decoder, mini, expected: np.ndarray) -> None:
    # What the parent opened is detached here: a closed forward decoder, a span decoder that
    # goes through a container. Using and dropping them must neither hang nor differ.
    if forward.context is not None or forward.container is not None or span._context is not None:
        raise SystemExit(3)
    frames = span.decode(mini)
    if not np.array_equal(rgb_array(frames[min(frames)]), expected):
        raise SystemExit(4)
    forward.close()
    span.close()
    del span, forward, frames
    gc.collect()


def _run_forked(target, *args) -> int:
    """Exit code of ``target(*args)`` in a fork-context child (what a DataLoader worker is)."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("a forked child hung on decoders or frames inherited from its parent")
    return child.exitcode


def _drop_and_decode_in_child(reader: VideoFrameReader, name: str, t: float, img: np.ndarray) -> None:
    got = reader.frames_at(name, [t])[0]
    reader.clear_cache()
    del reader  # frees everything the child owns; must not touch the parent's decoded frames
    if not np.array_equal(got, img):
        raise SystemExit(3)


def test_a_forked_reader_does_not_hang_on_inherited_frames(root: Path) -> None:
    """A map-style reader's decoded-span cache holds libdav1d frames; a child must not free them."""
    truth = decode_all(root / NAME)
    reader = VideoFrameReader(open_store(str(root)), video_paths=[NAME])
    reader.frames_at(NAME, [t for t, _ in truth[:6]])  # fills the decoded-span cache
    t, img = truth[9]
    assert _run_forked(_drop_and_decode_in_child, reader, NAME, t, img) == 0


def test_a_forked_child_parks_inherited_decoders(root: Path) -> None:
    store = open_store(str(root))
    table = VideoFrameReader(store).table(NAME)
    mini = fetch_span(store, NAME, table, plan_span(table, *frame_span(table, 0)))
    span = SpanDecoder(table, NAME)
    span.decode(mini)  # a codec context with decoded state
    whole = fetch_span(store, NAME, table, plan_span(table, 0, len(table) - 1))
    forward = _Decoder(whole, NAME, table)
    forward.next_frame()  # a decoder mid-span, frames buffered inside the codec
    expected = rgb_array(decode_span(mini, NAME)[min(mini.plan.pts_ticks.tolist())])
    assert _run_forked(_in_child, span, forward, mini, expected) == 0
    # the parent's own decoders are untouched
    assert span._context is not None and forward.context is not None
    assert forward.next_frame()[0] > min(whole.plan.pts_ticks.tolist())


def _exit_clean() -> None:
    raise SystemExit(0)


def test_a_fork_after_other_threads_converted_frames_does_not_hang() -> None:
    """`feedline plan --workers 0 --measure` converts frames on the parent's threads, then starts
    DataLoader workers: fork frees the other threads' converters in the child, which must not
    wait for scaler threads that do not exist there."""
    import threading

    import av

    frame = av.VideoFrame.from_ndarray(np.zeros((480, 640, 3), np.uint8), format="rgb24")
    frame = frame.reformat(format="yuv420p")
    converted, stop = threading.Barrier(4), threading.Event()

    def convert() -> None:
        rgb_array(frame)
        converted.wait()
        stop.wait()

    threads = [threading.Thread(target=convert, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    converted.wait()
    try:
        for _ in range(5):
            assert _run_forked(_exit_clean) == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join()
