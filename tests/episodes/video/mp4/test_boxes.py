"""The box parser and sample tables against PyAV, on real encoded files and on bad inputs."""

from __future__ import annotations

import struct
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedline.episodes.errors import Mp4Error
from feedline.episodes.video.mp4.boxes import locate_moov, parse_moov
from feedline.episodes.video.mp4.table import SampleTable, build_table, read_table
from tests.episodes import mp4_factory as factory
from tests.episodes.oracle import frame_times


def table_of(data: bytes, name: str = "test.mp4") -> SampleTable:
    return read_table(lambda s, e: data[s:e], len(data), name)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return factory.build_corpus(tmp_path_factory.mktemp("boxes"), extra=True)


def packets(path: Path) -> list[av.Packet]:
    with av.open(str(path)) as container:
        return [p for p in container.demux(container.streams.video[0]) if p.size]


def test_tables_match_pyav_packets_and_frame_times(corpus: dict[str, Path]) -> None:
    for name, path in corpus.items():
        table = table_of(path.read_bytes(), name)
        pkts = packets(path)
        assert len(pkts) == len(table), name
        assert [p.pos for p in pkts] == table.offset.tolist(), name
        assert [p.size for p in pkts] == table.size.tolist(), name
        assert [bool(p.is_keyframe) for p in pkts] == table.sync.tolist(), name
        # float64 presentation times bit-identical to PyAV's frame.time, in display order
        times = np.sort(table.pts[table.presented])
        assert times.tolist() == frame_times(path), name


def test_h264_has_reordering_ctts_and_encoder_delay_edit(corpus: dict[str, Path]) -> None:
    table = table_of(corpus["videos/h264_single_end.mp4"].read_bytes())
    assert table.info.has_ctts and table.info.edits == ((4000, 2048),)
    assert not np.array_equal(table.dts, table.dts + table.ctts)  # real reordering
    assert (np.diff(table.pts_ticks) < 0).any()
    assert table.sync_index.tolist() == [0, 30]
    av1 = table_of(corpus["videos/av1_multi.mp4"].read_bytes())
    assert not av1.info.has_ctts and av1.info.codec == "av01"
    # each of the three concatenated episodes starts on a keyframe
    assert {0, 12, 21} <= set(av1.sync_index.tolist())


def test_moov_found_with_few_reads_front_and_end(
    corpus: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few small range reads find the moov; the payload is never read."""
    from feedline.episodes.video.mp4 import boxes

    monkeypatch.setattr(boxes, "PROBE_BYTES", 1024)  # our files are tiny; keep the probe smaller
    for name, max_reads in (("videos/h264_multi.mp4", 2), ("videos/h264_single_end.mp4", 4)):
        data = corpus[name].read_bytes()
        calls: list[tuple[int, int]] = []

        def read_at(start: int, end: int, data: bytes = data, calls: list = calls) -> bytes:
            calls.append((start, end))
            return data[start:end]

        moov = locate_moov(read_at, len(data), name)
        assert moov[4:8] == b"moov"
        assert len(calls) <= max_reads, calls
        assert sum(e - s for s, e in calls) < 0.5 * len(data), (len(data), calls)


def test_large_table_variants_parse(corpus: dict[str, Path]) -> None:
    """co64 instead of stco and stz2 instead of stsz give the same table."""
    data = corpus["videos/av1_single_end.mp4"].read_bytes()
    base = table_of(data)
    _, start, end = factory.find_box(data, ["moov", "trak", "mdia", "minf", "stbl", "stco"])
    count = struct.unpack_from(">I", data, start + 12)[0]
    offsets = struct.unpack_from(f">{count}I", data, start + 16)
    co64 = struct.pack(">I4sII", 16 + 8 * count, b"co64", 0, count) + struct.pack(f">{count}Q", *offsets)
    patched = factory.replace_box(data, ["moov", "trak", "mdia", "minf", "stbl", "stco"], co64)
    sizes = base.size.tolist()
    stz2 = struct.pack(">I4sI3xBI", 20 + 2 * len(sizes), b"stz2", 0, 16, len(sizes))
    stz2 += struct.pack(f">{len(sizes)}H", *sizes)
    patched = factory.replace_box(patched, ["moov", "trak", "mdia", "minf", "stbl", "stsz"], stz2)
    other = table_of(patched)
    for column in ("offset", "size", "dts", "pts_ticks", "sync", "presented"):
        assert np.array_equal(getattr(base, column), getattr(other, column)), column


# ---------------------------------------------------------------------------------- bad input


def test_truncated_file_is_named(corpus: dict[str, Path]) -> None:
    front = corpus["videos/h264_multi.mp4"].read_bytes()
    with pytest.raises(Mp4Error, match=r"cut\.mp4: sample \d+ lies .* past the end of the file"):
        table_of(front[: len(front) // 2], "cut.mp4")
    end = corpus["videos/h264_single_end.mp4"].read_bytes()
    with pytest.raises(Mp4Error, match=r"cut\.mp4: moov box .* \(truncated file\?\)"):
        table_of(end[:-40], "cut.mp4")
    with pytest.raises(Mp4Error, match=r"cut\.mp4: no moov box"):
        table_of(end[: len(end) // 3], "cut.mp4")


def test_missing_moov_and_garbage(corpus: dict[str, Path]) -> None:
    data = bytearray(corpus["videos/av1_multi.mp4"].read_bytes())
    _, start, _ = factory.find_box(bytes(data), ["moov"])
    data[start + 4 : start + 8] = b"free"
    with pytest.raises(Mp4Error, match=r"x\.mp4: no moov box \(top-level boxes: ftyp, free"):
        table_of(bytes(data), "x.mp4")
    with pytest.raises(Mp4Error, match="no moov"):
        table_of(b"\x00" * 3, "x.mp4")
    with pytest.raises(Mp4Error, match="invalid size"):
        table_of(struct.pack(">I4s", 3, b"ftyp") + b"\x00" * 40, "x.mp4")


def _with_elst(data: bytes, entries: list[tuple[int, int, int, int]]) -> bytes:
    return factory.replace_box(data, ["moov", "trak", "edts", "elst"], factory.elst_box(entries))


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(4000, 2048, 1, 0), (4000, 2048, 1, 0)], "2 media edits"),
        ([(2000, 2048, 1, 0), (2000, 22528, 1, 0)], "2 media edits"),
        ([(4000, 2048, 2, 0)], "media rate 2"),
        ([(4000, 2048, 0, 0x8000)], "media rate 0.5"),
        ([(4000, 2048, 1, 0), (500, -1, 1, 0)], "shape not supported"),
        ([(0, 2048, 1, 0)], "zero duration"),
        ([(4000, 999999, 1, 0)], "presents no sample"),
        ([(4000, -7, 1, 0)], "invalid media_time"),
    ],
)
def test_bad_edit_lists_are_rejected(corpus: dict[str, Path], entries: list, message: str) -> None:
    data = corpus["videos/h264_single_end.mp4"].read_bytes()
    assert factory.read_elst(data) == [(4000, 2048, 1, 0)]
    with pytest.raises(Mp4Error, match=rf"^bad\.mp4: .*{message}"):
        table_of(_with_elst(data, entries), "bad.mp4")


def test_supported_edit_shapes_follow_ffmpeg_timeline(corpus: dict[str, Path], tmp_path: Path) -> None:
    """media_time before the first frame, after it, a short edit and a leading empty edit."""
    data = corpus["videos/h264_single_end.mp4"].read_bytes()
    for entries in (
        [(4000, 1024, 1, 0)],
        [(4000, 4096, 1, 0)],
        [(3300, 2048, 1, 0)],
        [(500, -1, 1, 0), (4000, 2048, 1, 0)],
        [(1234, -1, 1, 0), (4000, 2048, 1, 0)],
    ):
        path = tmp_path / "edit.mp4"
        path.write_bytes(_with_elst(data, entries))
        table = table_of(path.read_bytes())
        assert np.sort(table.pts[table.presented]).tolist() == frame_times(path), entries


def test_absurd_sample_count_is_rejected_without_allocating(corpus: dict[str, Path]) -> None:
    data = corpus["videos/av1_single_end.mp4"].read_bytes()
    stsz = struct.pack(">I4sIII", 20, b"stsz", 0, 1000, 0xFFFFFFF0)  # constant size, 4 G samples
    patched = factory.replace_box(data, ["moov", "trak", "mdia", "minf", "stbl", "stsz"], stsz)
    with pytest.raises(Mp4Error, match="stsz claims 4294967280 samples"):
        table_of(patched, "x.mp4")


def test_several_sample_descriptions_rejected(corpus: dict[str, Path]) -> None:
    data = bytearray(corpus["videos/av1_single_end.mp4"].read_bytes())
    _, start, _ = factory.find_box(bytes(data), ["moov", "trak", "mdia", "minf", "stbl", "stsd"])
    struct.pack_into(">I", data, start + 12, 2)
    with pytest.raises(Mp4Error, match="2 sample descriptions"):
        table_of(bytes(data), "x.mp4")


# ---------------------------------------------------------------------------------- fuzzing


def _parse_or_named_error(data: bytes) -> None:
    try:
        table = table_of(data, "fuzz.mp4")
    except Mp4Error as exc:
        assert str(exc).startswith("fuzz.mp4: ")
    else:
        assert len(table) > 0


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data: bytes) -> None:
    _parse_or_named_error(data)


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_real_moov(data: st.DataObject) -> None:
    """Flip, overwrite, cut and splice bytes of a real file's moov: Mp4Error or a valid table."""
    video = _fuzz_video()
    _, start, end = factory.find_box(video, ["moov"])
    buf = bytearray(video)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["set", "u32", "cut", "insert"]))
        pos = data.draw(st.integers(start, end - 5))
        if kind == "set":
            buf[pos] = data.draw(st.integers(0, 255))
        elif kind == "u32":
            value = data.draw(st.sampled_from([0, 1, 7, 8, 0xFFFFFFFF, 0x7FFFFFFF, 2**31, 12345]))
            struct.pack_into(">I", buf, pos, value)
        elif kind == "cut":
            del buf[pos : pos + data.draw(st.integers(1, 64))]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    _parse_or_named_error(bytes(buf))


def test_parse_moov_rejects_non_moov() -> None:
    with pytest.raises(Mp4Error, match="expected exactly one moov"):
        parse_moov(struct.pack(">I4s", 8, b"free"), "x.mp4")
    with pytest.raises(Mp4Error):
        build_table(parse_moov(_moov_of(_fuzz_video()), "x.mp4"), 10, "x.mp4")


_FUZZ_VIDEO: list[bytes] = []


def _fuzz_video() -> bytes:
    if not _FUZZ_VIDEO:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = factory.encode(Path(tmp) / "f.mp4", factory.make_frames(12), codec="h264", faststart=True)
            _FUZZ_VIDEO.append(path.read_bytes())
    return _FUZZ_VIDEO[0]


def _moov_of(data: bytes) -> bytes:
    _, start, end = factory.find_box(data, ["moov"])
    return data[start:end]
