"""The frame API the datasets call: every frame equals the whole-file PyAV decode, on every root."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from feedline.episodes.errors import FrameTimestampError, SidecarError
from feedline.episodes.video.frames import VideoFrameReader
from feedline.io import Store, open_store
from tests.episodes import mp4_factory as factory
from tests.episodes.oracle import decode_all


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("frames")
    return root, factory.build_corpus(root)


@pytest.fixture(scope="module")
def truth(corpus: tuple[Path, dict[str, Path]]) -> dict[str, list[tuple[float, np.ndarray]]]:
    return {name: decode_all(path) for name, path in corpus[1].items()}


def _store(kind: str, corpus: tuple[Path, dict[str, Path]], request: pytest.FixtureRequest) -> Store:
    root, files = corpus
    if kind == "local":
        return open_store(str(root))
    if kind == "nginx":
        server = request.getfixturevalue("nginx_server")
        target = Path(server.root) / "frames-corpus"
        if not target.exists():
            shutil.copytree(root, target)
        return open_store(f"{server.url}/frames-corpus")
    server = request.getfixturevalue("s3_server")
    import s3fs

    fs = s3fs.S3FileSystem(**server.storage_options)
    for rel, path in files.items():
        fs.pipe(f"{server.bucket}/frames-corpus/{rel}", path.read_bytes())
    return open_store(f"s3://{server.bucket}/frames-corpus", **server.storage_options)


@pytest.mark.parametrize("kind", ["local", "nginx", "s3"])
def test_every_frame_matches_whole_file_decode(
    kind: str,
    corpus: tuple[Path, dict[str, Path]],
    truth: dict[str, list[tuple[float, np.ndarray]]],
    request: pytest.FixtureRequest,
) -> None:
    store = _store(kind, corpus, request)
    reader = VideoFrameReader(store, revision="test", video_paths=sorted(corpus[1]))
    for name, frames in truth.items():
        times = [t for t, _ in frames]
        # one frame per call, cold decoder cache: each goes through its own mini-MP4
        for t, img in frames:
            reader.clear_cache()
            got = reader.frames_at(name, [t])
            assert got.shape == (1, *img.shape) and got.dtype == np.uint8
            assert np.array_equal(got[0], img), (kind, name, t)
        # all frames at once, reversed and repeated, slightly off the exact times
        wanted = times[::-1] + times[:3]
        jitter = np.array(wanted) + 4e-5
        got = reader.frames_at(name, jitter.tolist())
        expected = [img for t, img in frames[::-1]] + [img for t, img in frames[:3]]
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True)), (kind, name)
        # the predicted size is the exact length of what is fetched
        for plan in reader.span_plans(name, times[1], times[-2]):
            assert len(reader.fetch(name, plan).data) == plan.size
        assert reader.span_bytes(name, times[1], times[-2]) == sum(
            p.size for p in reader.span_plans(name, times[1], times[-2])
        )


def test_tolerance_error_names_file_wanted_and_nearest(corpus: tuple[Path, dict[str, Path]]) -> None:
    reader = VideoFrameReader(open_store(str(corpus[0])))
    with pytest.raises(FrameTimestampError) as info:
        reader.frames_at("videos/av1_multi.mp4", [0.1, 0.35])
    message = str(info.value)
    assert "av1_multi.mp4" in message and "t=0.35" in message and "nearest frame is at 0.3" in message
    with pytest.raises(FrameTimestampError, match="nearest frame is at 2.7"):
        reader.frames_at("videos/av1_multi.mp4", [99.0])
    got = reader.frames_at("videos/av1_multi.mp4", [0.35], tolerance_s=0.06)
    assert got.shape[0] == 1


def test_decoded_span_cache_serves_neighbours(corpus: tuple[Path, dict[str, Path]]) -> None:
    store = open_store(str(corpus[0]))
    reader = VideoFrameReader(store, decoder_cache_size=2)
    calls = []
    original = store.read_ranges

    def counting(path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        calls.append(path)
        return original(path, ranges)

    store.read_ranges = counting  # type: ignore[method-assign]
    name = "videos/h264_single_end.mp4"
    reader.frames_at(name, [0.0])
    for i in range(1, 30):
        reader.frames_at(name, [i / 10])
    assert len(calls) == 1  # one GOP, fetched and decoded once
    reader.frames_at(name, [3.5])
    assert len(calls) == 2


def test_reader_pickles_for_dataloader_workers(
    corpus: tuple[Path, dict[str, Path]], truth: dict[str, list[tuple[float, np.ndarray]]]
) -> None:
    reader = VideoFrameReader(open_store(str(corpus[0])), video_paths=["videos/av1_multi.mp4"])
    reader.frames_at("videos/av1_multi.mp4", [0.0])
    clone = pickle.loads(pickle.dumps(reader))
    t, img = truth["videos/av1_multi.mp4"][5]
    assert np.array_equal(clone.frames_at("videos/av1_multi.mp4", [t])[0], img)


def test_minimal_spans_decode_every_frame_with_fewer_bytes(
    corpus: tuple[Path, dict[str, Path]], truth: dict[str, list[tuple[float, np.ndarray]]]
) -> None:
    store = open_store(str(corpus[0]))
    gop = VideoFrameReader(store)
    minimal = VideoFrameReader(store, span_mode="minimal")
    for name, frames in truth.items():
        for t, img in frames:
            minimal.clear_cache()
            assert np.array_equal(minimal.frames_at(name, [t])[0], img), (name, t)
            assert minimal.span_bytes(name, t, t) <= gop.span_bytes(name, t, t)
    name = "videos/h264_single_end.mp4"
    first = truth[name][0][0]
    assert minimal.span_bytes(name, first, first) < gop.span_bytes(name, first, first)
    with pytest.raises(ValueError, match="span_mode"):
        VideoFrameReader(store, span_mode="whole")


def test_http_reads_only_moov_and_the_span(
    corpus: tuple[Path, dict[str, Path]],
    truth: dict[str, list[tuple[float, np.ndarray]]],
    nginx_server,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Over HTTP a cold open + one frame reads the moov and the frame's span, nothing else."""
    from feedline.episodes.video.mp4 import boxes

    monkeypatch.setattr(boxes, "PROBE_BYTES", 1024)  # test files are tiny; keep the probe smaller
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    store = _store("nginx", corpus, _Req(nginx_server))  # type: ignore[arg-type]
    name = "videos/h264_single_end.mp4"  # moov at the end
    size = corpus[1][name].stat().st_size
    log = Path(nginx_server.access_log)
    before = len(log.read_text().splitlines())
    reader = VideoFrameReader(store, video_paths=[name])
    t, img = truth[name][-1]
    assert np.array_equal(reader.frames_at(name, [t])[0], img)
    lines = [line for line in log.read_text().splitlines()[before:] if name in line]
    sent = sum(int(line.split('" ')[1].split()[1]) for line in lines)
    assert lines and all(" 206 " in line or "HEAD " in line for line in lines), lines
    assert sent < size
    (plan,) = reader.span_plans(name, t, t)
    payload = plan.size - len(plan.layout.header)
    gets = [int(line.split('" ')[1].split()[1]) for line in lines if line.startswith('"GET')]
    assert payload in gets  # the span: exactly its samples' bytes, in one request
    others = list(gets)
    others.remove(payload)
    assert len(others) <= 3 and all(n <= 2048 for n in others), gets  # the moov probes


class _Req:
    """Just enough of a pytest request for :func:`_store`."""

    def __init__(self, nginx_server) -> None:
        self.nginx_server = nginx_server

    def getfixturevalue(self, name: str):  # type: ignore[no-untyped-def]
        assert name == "nginx_server"
        return self.nginx_server


def test_frames_from_a_prefetched_mini_mp4(
    corpus: tuple[Path, dict[str, Path]], truth: dict[str, list[tuple[float, np.ndarray]]]
) -> None:
    store = open_store(str(corpus[0]))
    reader = VideoFrameReader(store, decoder_cache_size=0)
    name = "videos/h264_multi.mp4"
    frames = truth[name]
    first_ep = [t for t, _ in frames[:35]]  # episode 0 of the file: 35 frames
    (plan,) = reader.span_plans(name, first_ep[0], first_ep[-1])
    mini = reader.fetch(name, plan)
    assert len(mini.data) == plan.size == reader.span_bytes(name, first_ep[0], first_ep[-1])
    got = reader.frames_from(name, mini, first_ep[::-1])
    assert all(np.array_equal(a, b) for a, (_, b) in zip(got, frames[:35][::-1], strict=True))
    with pytest.raises(SidecarError, match="not inside the mini-MP4"):
        reader.frames_from(name, mini, [frames[40][0]])
    assert reader.frames_at(name, []).shape[0] == 0


def test_transient_http_faults_are_retried(
    corpus: tuple[Path, dict[str, Path]],
    truth: dict[str, list[tuple[float, np.ndarray]]],
    nginx_server,
    fault_proxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """503s and a dropped connection while indexing and fetching spans change nothing."""
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    _store("nginx", corpus, _Req(nginx_server))  # puts the corpus behind nginx
    store = open_store(f"{fault_proxy.url}/frames-corpus")
    name = "videos/av1_multi.mp4"
    fault_proxy.add_fault("status", code=503, count=2)
    fault_proxy.add_fault("drop", after_bytes=200, count=1)
    reader = VideoFrameReader(store, video_paths=[name])
    fault_proxy.add_fault("status", code=503, count=1)
    frames = truth[name]
    got = reader.frames_at(name, [t for t, _ in frames])
    assert all(np.array_equal(a, b) for a, (_, b) in zip(got, frames, strict=True))
    assert not fault_proxy.faults  # every injected fault was hit
